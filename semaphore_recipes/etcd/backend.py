"""One etcd lease (the session) shared by every semaphore of a backend object.

Connection trouble: when keepalives go unacknowledged for 2/3 of the TTL, held permits
are SUSPENDED (the lease may still be alive); they are HELD again when acks return.
When the server says the lease is gone, held permits are LOST (``permit.lost`` set),
waiters re-enter the queue on a fresh lease, and later acquires use that lease.

With several threads waiting on one backend when the lease ends, exactly one of them
grants the new lease; the others wait for it (each within its own deadline) and then
enqueue on it. The old lease's keeper is stopped, and a report about an old lease
(from its keeper or from a refused request) never ends the lease that replaced it.

Bounds: opening waits at most ``connect_timeout``; every later call but a waiting
acquire at most ``request_timeout`` (requests retried on UNAVAILABLE until then), then
raises BackendUnavailable; ``close()`` leaves a lease it could not revoke in time to
expire.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from .._core.deadline import Deadline
from .._core.names import etcd_entry_key, parse_etcd_entry, validate_name
from .._interrupts import call_with_sigint_held
from .._url import DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, ServiceURL
from ..backend import (
    RESTORED,
    SUSPENDED,
    Backend,
    SessionEvent,
    SessionState,
    default_owner,
    session_lost,
)
from ..errors import (
    AcquireTimeout,
    AuthenticationFailed,
    BackendUnavailable,
    InvalidName,
    PermissionDenied,
)
from .client import EtcdClient
from .errors import EtcdAuthError, EtcdError, EtcdLeaseNotFound, EtcdUnavailable
from .lease import LeaseKeeper
from .ops import prefix_range_end
from .retry import retry_unavailable

if TYPE_CHECKING:
    from .queue import EtcdQueue

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
        raise InvalidName(f"invalid etcd key prefix {prefix!r}")
    return prefix if prefix.endswith("/") else prefix + "/"


class EtcdBackend(Backend):
    """Semaphores over one etcd client and one lease (the session).

    Built by :func:`semaphore_recipes.connect` from an ``etcd://`` URL. ``close()``
    revokes the lease, which removes this backend's entries at once.
    ``request_timeout`` bounds every call but a waiting acquire (seconds).
    """

    scheme = "etcd"

    def __init__(
        self,
        client: EtcdClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        owner: str | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        super().__init__(owner=owner or default_owner(), request_timeout=request_timeout)
        self.client = client
        self.prefix = validate_prefix(prefix)
        self.ttl = max(1, math.ceil(session_timeout))
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._lease_changed = threading.Condition(self._lock)  # a grant ended (either way)
        self._granting = False  # one thread is granting a new lease: the others wait
        self._queues: weakref.WeakSet[EtcdQueue] = weakref.WeakSet()
        self._closed = False
        # fire-and-forget writes (held marks, deletes that must be retried)
        self.background = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sr-etcd")
        self.lease_id = 0
        self._slots: set[tuple[int, int]] = set()  # (lease, slot) of entries not yet deleted
        self._keeper: LeaseKeeper | None = None
        self._new_lease(Deadline(connect_timeout, _monotonic))

    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> EtcdBackend:
        """A backend for an ``etcd://`` URL. Raises ValueError, before any I/O, on a
        parameter etcd does not take (a ZooKeeper one such as ``root``, or a typo): the
        key prefix is the URL's path, and a silently ignored setting is a wrong one."""
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
        client = EtcdClient(
            [f"{h}:{p}" for h, p in url.hosts],
            timeout=request_timeout,
            ca_cert=params.get("ca"),
            cert_cert=params.get("cert"),
            cert_key=params.get("key"),
            user=params.get("user"),
            password=params.get("password"),
        )
        try:
            return cls(
                client,
                prefix=prefix,
                owner=owner,
                session_timeout=session_timeout,
                connect_timeout=connect_timeout,
                request_timeout=request_timeout,
            )
        except BaseException:
            client.close()
            raise

    def run(self, fn: Callable[[], T]) -> T:
        """Run one blocking etcd call, bounded by a timeout of a few seconds, for the
        calling thread. On the main thread Ctrl-C is held until the call returns, so a
        KeyboardInterrupt never lands inside grpc's code (see ``_interrupts``)."""
        return call_with_sigint_held(fn)

    # ---- the session (lease) -------------------------------------------------
    def _new_lease(self, deadline: Deadline) -> int:
        try:
            lease_id, ttl = retry_unavailable(
                lambda timeout: self.run(
                    lambda: self.client.lease_grant(self.ttl, timeout=timeout)
                ),
                Deadline(deadline.cap(3600.0), _monotonic),
                attempt_timeout=2.0,
                initial_backoff=0.02,
                max_backoff=0.5,
            )
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
        # Every report of this keeper names its lease: a late one about a lease that was
        # already replaced must not touch the new lease or its permits.
        keeper = LeaseKeeper(
            self.client,
            lease_id,
            ttl,
            on_expired=lambda: self.lease_gone(lease_id),
            on_suspended=lambda: self._keeper_reports(lease_id, SUSPENDED),
            on_restored=lambda: self._keeper_reports(lease_id, RESTORED),
            start=False,
        )
        with self._lock:
            closed = self._closed
            if not closed:
                old_keeper = self._keeper
                self.lease_id, self._keeper = lease_id, keeper
        if closed:  # closed while the grant was on its way: nobody will use this lease
            self._revoke(lease_id)
            raise BackendUnavailable("the etcd backend is closed")
        if old_keeper is not None:  # (cannot happen: an ended lease's keeper is stopped)
            old_keeper.stop(timeout=0)
        keeper.start()
        log.info("etcd session: lease %x, TTL %d s", lease_id, ttl)
        return lease_id

    def current_lease(self, deadline: Deadline) -> int:
        """The live lease, granting a new one after an expiry (within ``deadline``).

        Single-flight: when several threads find the lease gone, one grants the new lease
        and the others wait for it; if that grant fails, the next waiter tries in turn.
        Raises AcquireTimeout when ``deadline`` passes first, BackendUnavailable when the
        backend is closed or no member grants a lease.
        """
        with self._lock:
            while True:
                if self._closed:
                    raise BackendUnavailable("the etcd backend is closed")
                if self.lease_id:
                    return self.lease_id
                if deadline.expired():
                    raise AcquireTimeout("timed out waiting for a new etcd lease")
                if not self._granting:
                    self._granting = True
                    break
                self._lease_changed.wait(deadline.cap(1.0))
        try:
            return self._new_lease(deadline)
        finally:
            with self._lock:
                self._granting = False
                self._lease_changed.notify_all()

    def take_entry_slot(self, lease_id: int) -> str:
        """An entry key (``<lease>-<slot>``) for a new entry on ``lease_id``: the lowest
        slot of that lease whose last entry is known deleted. Unique among our live
        entries, across every semaphore of this backend."""
        with self._lock:
            self._slots = {s for s in self._slots if s[0] == lease_id}  # old leases: gone
            slot = 0
            while (lease_id, slot) in self._slots:
                slot += 1
            self._slots.add((lease_id, slot))
        return etcd_entry_key(lease_id, slot)

    def free_entry_slot(self, uid: str) -> None:
        """The entry ``uid`` is deleted (or was never created): its key may serve again."""
        slot = parse_etcd_entry(uid)
        with self._lock:
            self._slots.discard(slot)

    def lease_gone(self, lease_id: int) -> None:
        """The server said ``lease_id`` is gone (a refused request, or its keeper): held
        permits are lost and waiters enter the queue again. A no-op unless ``lease_id``
        is the current lease (its successor is not touched)."""
        with self._lock:
            if self._closed or not lease_id or self.lease_id != lease_id:
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

    def _revoke(self, lease_id: int, deadline: Deadline | None = None) -> None:
        try:
            timeout = 2.0 if deadline is None else (deadline.cap(2.0) or 0.001)
            self.client.lease_revoke(lease_id, timeout=timeout)
        except EtcdLeaseNotFound:
            pass  # already gone (expired, or revoked from outside): nothing to do
        except EtcdError as exc:
            log.warning("could not revoke lease %x (it expires by itself): %s", lease_id, exc)

    # ---- registries ----------------------------------------------------------
    def register_queue(self, queue: EtcdQueue) -> None:
        with self._lock:
            self._queues.add(queue)

    # ---- public --------------------------------------------------------------
    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> EtcdQueue:
        from .queue import EtcdQueue

        return EtcdQueue(self, name, capacity, adopt_capacity=adopt_capacity, create=create)

    def describe(self) -> str:
        return f"etcd at {', '.join(self.client.endpoints)} (prefix {self.prefix})"

    @property
    def session_state(self) -> SessionState:
        with self._lock:
            if self._closed:
                return SessionState.CLOSED
            keeper = self._keeper
            if not self.lease_id or keeper is None:
                return SessionState.EXPIRED
        return SessionState.SUSPENDED if keeper.suspended else SessionState.CONNECTED

    @property
    def closed(self) -> bool:
        return self._closed

    def read(self, key: str) -> bytes | None:
        raw = key.encode()
        reply = self._bounded(lambda timeout: self.client.range(raw, timeout=timeout), f"key {key}")
        return bytes(reply.kvs[0].value) if reply.kvs else None

    def data_key(self, semaphore: str, name: str = "data") -> str:
        # beside config and entries/
        return f"{self.prefix}{validate_name(semaphore)}/data/{validate_name(name)}"

    def delete_semaphore(self, name: str) -> None:
        start = f"{self.prefix}{validate_name(name)}/".encode()
        end = prefix_range_end(start)
        self._bounded(
            lambda timeout: self.client.delete_range(start, end, timeout=timeout),
            f"keys under {start.decode()}",
        )

    def _bounded(self, request: Callable[[float], T], target: str) -> T:
        """A retry-safe request of this backend's own, retried on UNAVAILABLE within the
        request timeout (then BackendUnavailable); PermissionDenied naming ``target``."""
        deadline = Deadline(self.request_timeout, _monotonic)
        try:
            return retry_unavailable(
                lambda timeout: self.run(lambda: request(timeout)), deadline, attempt_timeout=2.0
            )
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
        with self._lock:
            if self._closed:
                return
            self._closed = True
            keeper, lease_id = self._keeper, self.lease_id
            queues = list(self._queues)
            self._lease_changed.notify_all()  # threads waiting for a new lease: closed
        for queue in queues:
            queue.close(deadline)
        # Queued marks and delete retries are moot: the revoke removes every entry. A
        # running one ends after its attempt (its queue is closed).
        self.background.shutdown(wait=False, cancel_futures=True)
        if keeper is not None:
            keeper.stop(timeout=deadline.cap(1.0))
        if lease_id:
            self._revoke(lease_id, deadline)
        self.client.close()


def _on_lease(entry_id: str | None, lease_id: int) -> bool:
    return entry_id is not None and parse_etcd_entry(entry_id)[0] == lease_id


def _monotonic() -> float:
    import time

    return time.monotonic()
