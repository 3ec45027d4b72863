"""One etcd lease (the session) shared by every semaphore of a backend object.

Connection trouble: when keepalives go unacknowledged for 2/3 of the TTL, held permits
are SUSPENDED (the lease may still be alive); they are HELD again when acks return.
When the server says the lease is gone, held permits are LOST (``permit.lost`` set),
waiters re-enter the queue on a fresh lease, and later acquires use that lease.

With several threads waiting on one backend when the lease ends, exactly one of them
grants the new lease; the others wait for it (each within its own deadline) and then
enqueue on it. The old lease's keeper is stopped, and a report about an old lease
(from its keeper or from a refused request) never ends the lease that replaced it.

Bounds: opening waits at most ``connect_timeout`` (at once BackendUnavailable when
every address refuses: :mod:`.._reachability`); every later call but a waiting
acquire at most ``request_timeout`` (requests retried on UNAVAILABLE until then), then
raises BackendUnavailable; ``close()`` leaves a lease it could not revoke in time to
expire.

The asyncio face (``sr.aio.connect``) is the same backend over an
:class:`~.aio_client.AioEtcdClient`: the same programs awaited (:mod:`.runner`), the
watch stream as a task of the loop, the lease's keepalive on threads of its own
(:mod:`.aio_lease`: a busy loop does not delay it; its reports run in the loop), and
the same behaviour on connection loss and expiry (several tasks finding the lease
gone: one grants, the others await it).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .. import _reachability
from .._core.codec import decode_capacity
from .._core.deadline import Deadline
from .._core.names import etcd_entry_key, parse_etcd_entry, validate_name
from .._core.program import Program
from .._core.shown import quoted
from .._url import DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, ServiceURL
from ..backend import (
    RESTORED,
    SUSPENDED,
    Backend,
    Capabilities,
    Enqueued,
    FencedTransaction,
    QueueDriver,
    SessionEvent,
    SessionState,
    StoredSemaphore,
    Waiter,
    by_name,
    default_owner,
    session_lost,
    vouched_since,
)
from ..errors import (
    AcquireTimeout,
    AuthenticationFailed,
    BackendUnavailable,
    InvalidName,
    PermissionDenied,
    StoreHistoryReset,
)
from . import multi
from ._proto import etcd_api_pb2 as pb
from .aio_client import AioEtcdClient
from .aio_lease import AsyncLeaseKeeper
from .client import EtcdClient
from .errors import EtcdAuthError, EtcdError, EtcdLeaseNotFound, EtcdUnavailable
from .history import StoreHistory
from .lease import LeaseKeeper
from .ops import Op, prefix_range_end
from .queue import EtcdQueue
from .retry import retrying
from .rpc import Call, granted_lease
from .runner import AsyncRunner, SyncRunner
from .slots import EntrySlots
from .turns import AwaitTurn, Turns

log = logging.getLogger("semaphore_recipes.etcd")
T = TypeVar("T")

DEFAULT_PREFIX = "/semaphore_recipes/"
DEFAULT_SESSION_TIMEOUT = 10.0
# the parameters an etcd:// URL may carry (docs/operations.md)
URL_PARAMETERS = frozenset(
    {
        "session_timeout",
        "connect_timeout",
        "request_timeout",
        "user",
        "password",
        "ca",
        "cert",
        "key",
    }
)


def validate_prefix(prefix: str) -> str:
    if not prefix.startswith("/") or "\x00" in prefix or "/../" in prefix + "/":
        raise InvalidName(f"invalid etcd key prefix {quoted(prefix)}")
    return prefix if prefix.endswith("/") else prefix + "/"


class EtcdBackend(Backend):
    """Semaphores over one etcd client and one lease (the session).

    Built by :func:`semaphore_recipes.connect` from an ``etcd://`` URL (over an
    :class:`EtcdClient`), or by :func:`semaphore_recipes.aio.connect` (over an
    :class:`AioEtcdClient`: the asyncio face, which runs its programs with
    :meth:`run_async` only). ``close()`` revokes the lease, which removes this
    backend's entries at once.
    ``request_timeout`` bounds every call but a waiting acquire (seconds).
    """

    scheme = "etcd"
    capabilities = Capabilities(
        async_face=True,
        slots=True,
        acquire_all=True,
        drain=True,
        ramp=True,
        revoke=True,
        peek_before_arming=True,
    )
    queue_type = EtcdQueue

    def __init__(
        self,
        client: EtcdClient | AioEtcdClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        owner: str | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        """Over an :class:`EtcdClient` the lease is granted here (blocking); over an
        :class:`AioEtcdClient` (made in the running loop) :meth:`start_async` grants it."""
        super().__init__(owner=owner or default_owner(), request_timeout=request_timeout)
        self.client = client
        self.prefix = validate_prefix(prefix)
        self.ttl = max(1, math.ceil(session_timeout))
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._granting = False  # one caller is granting a new lease: the others wait
        self._grants = Turns(self._lock)  # a turn ends with each grant (either way)
        self._queues: weakref.WeakSet[EtcdQueue] = weakref.WeakSet()
        self._closed = False
        self.lease_id = 0
        self._slots = EntrySlots()  # keys of entries not yet deleted (reused once they are)
        self._keeper: LeaseKeeper | AsyncLeaseKeeper | None = None
        self._sync: SyncRunner | None = None
        self._aio: AsyncRunner | None = None
        self._history = StoreHistory()  # the cluster id and newest revision seen
        self._failure: str | None = None  # the store's history restarted: why
        if isinstance(client, AioEtcdClient):
            self._aio = AsyncRunner(client, self._history.seen)
        else:
            self._sync = SyncRunner(client, self._history.seen)
            self.run(self._new_lease(Deadline(connect_timeout, _monotonic)))

    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> EtcdBackend:
        """A backend for an ``etcd://`` URL. Raises ValueError, before any I/O, on a
        parameter etcd does not take (a ZooKeeper one such as ``root``, or a typo): the
        key prefix is the URL's path, and a silently ignored setting is a wrong one."""
        settings = _settings(url)
        _reachability.refuse_early("etcd", url.hosts)  # every address refused: now
        client = EtcdClient(settings.endpoints, **settings.client_options)
        try:
            return cls(client, owner=owner, **settings.backend_options)
        except BackendUnavailable as exc:
            client.close()
            if not isinstance(exc.__cause__, EtcdUnavailable):
                raise
            said = _reachability.diagnose("etcd", _reachability.HTTP2, url.hosts, settings.tls)
            raise BackendUnavailable(f"{exc}: {said}") from exc.__cause__
        except BaseException:
            client.close()
            raise

    @classmethod
    async def from_url_async(cls, url: ServiceURL, *, owner: str | None = None) -> EtcdBackend:
        """:meth:`from_url` for the asyncio face: a ``grpc.aio`` channel, the lease
        granted without blocking the loop, its keepalive off the loop (:mod:`.aio_lease`)."""
        settings = _settings(url)
        await _reachability.refuse_early_async("etcd", url.hosts)
        client = AioEtcdClient(settings.endpoints, **settings.client_options)
        try:
            backend = cls(client, owner=owner, **settings.backend_options)
            await backend.run_async(
                backend._new_lease(Deadline(backend.connect_timeout, _monotonic))
            )
        except BackendUnavailable as exc:
            await client.close()
            if not isinstance(exc.__cause__, EtcdUnavailable):
                raise
            said = await _reachability.diagnose_async(
                "etcd", _reachability.HTTP2, url.hosts, settings.tls
            )
            raise BackendUnavailable(f"{exc}: {said}") from exc.__cause__
        except BaseException:
            await client.close()
            raise
        return backend

    # ---- running programs (runner.py) ---------------------------------------------
    def run(self, program: Program[T]) -> T:
        """Run a program of this backend's on the sync face, blocking."""
        if self._sync is None:
            raise RuntimeError("this etcd backend is driven by the asyncio face")
        return self._sync.run(program)

    async def run_async(self, program: Program[T]) -> T:
        """Run a program of this backend's on the asyncio face, awaited."""
        if self._aio is None:
            raise RuntimeError("this etcd backend is driven by the sync face")
        return await self._aio.run(program)

    def spawn(self, program: Program[None]) -> None:
        """Run a program in the background (a pool thread, or a task of the loop)."""
        if self._aio is not None:
            self._aio.spawn(program)
        elif self._sync is not None:
            self._sync.spawn(program)

    # ---- the session (lease) -------------------------------------------------
    def _new_lease(self, deadline: Deadline) -> Program[int]:
        try:
            reply = yield from retrying(
                lambda timeout: Call.lease_grant(self.ttl, timeout=timeout),
                Deadline(deadline.cap(3600.0), _monotonic),
                attempt_timeout=2.0,
                initial_backoff=0.02,
                max_backoff=0.5,
            )
            lease_id, ttl = granted_lease(reply)
            went_back = self._history.went_back(reply, ", ".join(self.client.endpoints))
        except EtcdUnavailable as exc:
            raise BackendUnavailable(
                f"no etcd member answered at {', '.join(self.client.endpoints)}"
            ) from exc
        except EtcdAuthError as exc:
            # a lease grant needs no key permission: what was refused is the login
            raise AuthenticationFailed(
                "etcd", self.client.user, ", ".join(self.client.endpoints), str(exc)
            ) from exc
        except EtcdError as exc:
            raise BackendUnavailable(f"etcd refused a lease: {exc}") from exc
        if went_back is not None:
            self._history_restarted(went_back)
            yield from self._revoke(lease_id, deadline)  # a lease of the new store: not ours
            raise StoreHistoryReset(went_back)
        # Every report of this keeper names its lease: a late one about a lease that was
        # already replaced must not touch the new lease or its permits.
        keeper: LeaseKeeper | AsyncLeaseKeeper
        reports: dict[str, Any] = dict(
            on_expired=lambda: self.lease_gone(lease_id),
            on_suspended=lambda: self._keeper_reports(lease_id, SUSPENDED),
            on_restored=lambda: self._keeper_reports(lease_id, RESTORED),
        )
        if isinstance(self.client, AioEtcdClient):
            keeper = AsyncLeaseKeeper(self.client, lease_id, ttl, **reports)
        else:
            keeper = LeaseKeeper(self.client, lease_id, ttl, start=False, **reports)
        with self._lock:
            closed = self._closed
            if not closed:
                old_keeper = self._keeper
                self.lease_id, self._keeper = lease_id, keeper
        if closed:  # closed while the grant was on its way: nobody will use this lease
            yield from self._revoke(lease_id)
            raise BackendUnavailable("the etcd backend is closed")
        if old_keeper is not None:  # (cannot happen: an ended lease's keeper is stopped)
            old_keeper.stop(timeout=0)
        keeper.start()
        log.info("etcd session: lease %x, TTL %d s", lease_id, ttl)
        return lease_id

    def _history_restarted(self, reason: str) -> None:
        """The store's history went back (:mod:`.history`): nothing of this backend's
        session survives there. Permits are LOST, waiters fail, later calls raise
        StoreHistoryReset."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = reason
        log.error("%s", reason)
        self.fail(reason)

    def lease(self, deadline: Deadline) -> Program[int]:
        """The live lease, granting a new one after an expiry (within ``deadline``).

        Single-flight: when several callers find the lease gone, one grants the new lease
        and the others wait for it; if that grant fails, the next waiter tries in turn.
        Raises AcquireTimeout when ``deadline`` passes first, BackendUnavailable when the
        backend is closed or no member grants a lease.
        """
        while True:
            with self._lock:
                if self._closed:
                    raise BackendUnavailable("the etcd backend is closed")
                if self._failure is not None:
                    raise StoreHistoryReset(self._failure)
                if self.lease_id:
                    return self.lease_id
                if deadline.expired():
                    raise AcquireTimeout("timed out waiting for a new etcd lease")
                if not self._granting:
                    self._granting = True
                    break
                turn = self._grants.turn
            yield AwaitTurn(self._grants, turn, deadline.cap(1.0))
        try:
            return (yield from self._new_lease(deadline))
        finally:
            self._grant_over()

    def _grant_over(self) -> None:
        with self._lock:
            self._granting = False
            self._grants.end()
        self._grants.wake()

    def take_entry_slot(self, lease_id: int) -> str:
        """An entry key (``<lease>-<slot>``) for a new entry on ``lease_id``: the lowest
        slot of that lease whose last entry is known deleted. Unique among our live
        entries, across every semaphore of this backend."""
        with self._lock:
            slot = self._slots.take(lease_id)
        return etcd_entry_key(lease_id, slot)

    def free_entry_slot(self, uid: str) -> None:
        """The entry ``uid`` is deleted (or was never created): its key may serve again."""
        lease_id, slot = parse_etcd_entry(uid)
        with self._lock:
            self._slots.free(lease_id, slot)

    def lease_gone(self, lease_id: int) -> None:
        """The server said ``lease_id`` is gone (a refused request, or its keeper): held
        permits are lost and waiters enter the queue again. A no-op unless ``lease_id``
        is the current lease (its successor is not touched)."""
        with self._lock:
            if self._closed or self._failure or not lease_id or self.lease_id != lease_id:
                return
            self.lease_id = 0
            keeper, self._keeper = self._keeper, None
        log.warning("etcd lease %x is gone: held permits are lost", lease_id)
        if keeper is not None:
            keeper.stop(timeout=0)
        self.publish(session_lost("etcd lease expired"))
        # Only the waiters whose entry is (or is being created) on that lease: one already
        # enqueued on a newer lease would otherwise leave its live entry, or be granted
        # and at once take its permit for lost while its entry stays (and blocks others).
        self.requeue_waiters(lambda entry_id: _on_lease(entry_id, lease_id))

    def _keeper_reports(self, lease_id: int, change: SessionEvent) -> None:
        """``suspended``/``restored`` from the keeper of ``lease_id``: told to the permits
        only while that lease is the current one."""
        with self._lock:
            if self.lease_id != lease_id:
                return
        self.publish(change)

    def _revoke(self, lease_id: int, deadline: Deadline | None = None) -> Program[None]:
        try:
            timeout = 2.0 if deadline is None else (deadline.cap(2.0) or 0.001)
            yield Call.lease_revoke(lease_id, timeout=timeout)
        except EtcdLeaseNotFound:
            pass  # already gone (expired, or revoked from outside): nothing to do
        except EtcdError as exc:
            log.warning("could not revoke lease %x (it expires by itself): %s", lease_id, exc)

    # ---- registries ----------------------------------------------------------
    def register_queue(self, queue: EtcdQueue) -> None:
        with self._lock:
            self._queues.add(queue)

    # ---- public --------------------------------------------------------------
    # ---- several semaphores at once: one txn creates, one txn deletes (multi.py)
    def enqueue_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> Program[dict[str, Enqueued]]:
        return multi.enqueuing_all(self, queues, deadline)

    def delete_all(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> Program[None]:
        return multi.deleting_all(self, queues)

    def transaction_all(
        self, entries: Sequence[tuple[QueueDriver, str]], token: int
    ) -> FencedTransaction:
        return multi.transaction_all(entries, token)

    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[EtcdQueue]:
        return EtcdQueue(self, name).open(capacity, adopt_capacity, create)

    def describe(self) -> str:
        return f"etcd at {', '.join(self.client.endpoints)} (prefix {self.prefix})"

    @property
    def session_state(self) -> SessionState:
        with self._lock:
            if self._closed:
                return SessionState.CLOSED
            if self._failure is not None:
                return SessionState.FAILED
            keeper = self._keeper
            if not self.lease_id or keeper is None:
                return SessionState.EXPIRED
        return SessionState.SUSPENDED if keeper.suspended else SessionState.CONNECTED

    def session_vouched(self, contact: float) -> bool:
        # (a request does not renew the lease: only its keepalives count. From their
        # acknowledgement, a little after the server renewed it: VOUCH_MARGIN covers it)
        with self._lock:
            keeper = None if self._closed or not self.lease_id else self._keeper
        return keeper is not None and vouched_since(keeper.last_ack, keeper.ttl)

    @property
    def closed(self) -> bool:
        return self._closed

    def reading(self, key: str) -> Program[bytes | None]:
        raw = key.encode()
        reply = yield from self._bounded(
            lambda timeout: Call.range(raw, timeout=timeout), f"key {key}"
        )
        return bytes(reply.kvs[0].value) if reply.kvs else None

    def data_key(self, semaphore: str, name: str = "data") -> str:
        # beside config and entries/
        return f"{self.prefix}{validate_name(semaphore)}/data/{validate_name(name)}"

    def deleting_semaphore(self, name: str) -> Program[None]:
        start = f"{self.prefix}{name}/".encode()
        end = prefix_range_end(start)
        yield from self._bounded(
            lambda timeout: Call.delete_range(start, end, timeout=timeout),
            f"keys under {start.decode()}",
        )

    def listing(self) -> Program[tuple[StoredSemaphore, ...]]:
        # the keys alone (every entry's too: etcd has no filter by suffix), then the
        # config keys' values, LISTED_PER_TXN per txn (etcd's --max-txn-ops: 128)
        start = self.prefix.encode()
        keys = yield from self._bounded(
            lambda timeout: Call.range(
                start, prefix_range_end(start), keys_only=True, timeout=timeout
            ),
            f"keys under {self.prefix}",
        )
        names = [
            name
            for kv in keys.kvs
            if (name := _semaphore_of_config(kv.key[len(start) :].decode())) is not None
        ]
        found = []
        for at in range(0, len(names), LISTED_PER_TXN):
            batch = names[at : at + LISTED_PER_TXN]
            ranges = [Op.range(f"{self.prefix}{name}/config".encode()) for name in batch]
            reply = yield from self._bounded(
                functools.partial(_reading_all, ranges), f"the capacities under {self.prefix}"
            )
            for name, response in zip(batch, reply.responses, strict=True):
                kvs = response.response_range.kvs
                if kvs:  # (else deleted meanwhile)
                    found.append((name, decode_capacity(name, kvs[0].value)))
        return by_name(found)

    def _bounded(self, make: Callable[[float], Call], target: str) -> Program[Any]:
        """A retry-safe call of this backend's own, retried on UNAVAILABLE within the
        request timeout (then BackendUnavailable); PermissionDenied naming ``target``."""
        if self._failure is not None:
            raise StoreHistoryReset(self._failure)
        deadline = Deadline(self.request_timeout, _monotonic)
        try:
            return (yield from retrying(make, deadline, attempt_timeout=2.0))
        except EtcdUnavailable as exc:
            raise BackendUnavailable(f"etcd unreachable ({target}): {exc}") from exc
        except EtcdAuthError as exc:
            raise self.permission_denied(target, exc) from exc

    def permission_denied(self, target: str, exc: BaseException) -> PermissionDenied:
        """The library's error for the etcd layer's ``EtcdAuthError``; ``target`` says
        which keys were refused (``"keys under /prefix/name/"``)."""
        return PermissionDenied("etcd", self.client.user, target, str(exc))

    def close(self) -> None:
        """Revoke the lease (this backend's entries go at once) and close the client.

        Returns within the request timeout: a lease that could not be revoked by then
        expires by itself after its TTL, and its entries with it."""
        deadline = Deadline(self.request_timeout, _monotonic)
        lease_id = self._closing(deadline)
        if lease_id is None:
            return
        assert self._sync is not None and isinstance(self.client, EtcdClient)
        # Queued marks and delete retries are moot: the revoke removes every entry. A
        # running one ends after its attempt (its queue is closed).
        self._sync.close()
        if lease_id:
            self.run(self._revoke(lease_id, deadline))
        self.client.close()

    async def close_async(self) -> None:
        """:meth:`close`, awaited: the keepalive threads, the watch stream's task and the
        background tasks end, the lease is revoked, the channel closed."""
        deadline = Deadline(self.request_timeout, _monotonic)
        lease_id = self._closing(deadline)
        if lease_id is None:
            return
        assert self._aio is not None and isinstance(self.client, AioEtcdClient)
        await self._aio.close()
        if lease_id:
            await self.run_async(self._revoke(lease_id, deadline))
        await self.client.close()

    def _closing(self, deadline: Deadline) -> int | None:
        """Mark the backend closed, stop its queues' watches and its keeper: the lease to
        revoke (0: none), or None when it was closed already."""
        with self._lock:
            if self._closed:
                return None
            self._closed = True
            keeper, lease_id = self._keeper, self.lease_id
            queues = list(self._queues)
            self._grants.notify_all()  # callers waiting for a new lease: closed
        # The revoke takes every entry: held permits are lost, waiting acquires end.
        self.fail("the backend was closed")
        for queue in queues:
            queue.close(deadline)
        if keeper is not None:
            keeper.stop(timeout=deadline.cap(1.0))
        return lease_id


@dataclass(frozen=True)
class _Settings:
    """What an ``etcd://`` URL says, for either client and the backend."""

    endpoints: list[str]
    client_options: dict[str, Any] = field(repr=False)  # (holds the password)
    backend_options: dict[str, Any]
    tls: bool


def _settings(url: ServiceURL) -> _Settings:
    params = url.params
    unknown = sorted(set(params) - URL_PARAMETERS)
    if unknown:
        hint = " (etcd uses the URL path as its key prefix)" if "root" in unknown else ""
        raise ValueError(
            f"etcd URL parameter(s) {', '.join(unknown)} not understood{hint}; "
            f"known: {', '.join(sorted(URL_PARAMETERS))}"
        )
    session_timeout = url.seconds_param("session_timeout", DEFAULT_SESSION_TIMEOUT)
    connect_timeout = url.connect_timeout()
    request_timeout = url.request_timeout()
    prefix = validate_prefix(url.path + "/") if url.path else DEFAULT_PREFIX
    return _Settings(
        endpoints=[f"{h}:{p}" for h, p in url.hosts],
        client_options=dict(
            timeout=request_timeout,
            ca_cert=params.get("ca"),
            cert_cert=params.get("cert"),
            cert_key=params.get("key"),
            user=params.get("user"),
            password=params.get("password"),
        ),
        backend_options=dict(
            prefix=prefix,
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
        ),
        tls=any(params.get(name) for name in ("ca", "cert", "key")),
    )


def _on_lease(entry_id: str | None, lease_id: int) -> bool:
    return entry_id is not None and parse_etcd_entry(entry_id)[0] == lease_id


def _monotonic() -> float:
    import time

    return time.monotonic()


#: config keys read per txn by ``listing`` (below etcd's default --max-txn-ops, 128)
LISTED_PER_TXN = 100


def _reading_all(ranges: list[pb.RequestOp], timeout: float) -> Call:
    return Call.txn([], ranges, timeout=timeout)


def _semaphore_of_config(key: str) -> str | None:
    """The semaphore whose ``<name>/config`` key is ``key`` (relative to the prefix),
    or None for any other key (entries, slots, data keys)."""
    name, sep, rest = key.partition("/")
    if not sep or rest != "config":
        return None
    try:
        return validate_name(name)
    except InvalidName:
        return None
