"""The Redis backend: ``redis://[user:password@]host:port[/db]?prefix=P`` (``rediss://``: TLS),
or through Sentinel: ``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]``
(``rediss+sentinel://``).

A session is a lease key the backend renews (:mod:`.lease`); entries die with it. Each
protocol step is one Lua script (:mod:`.scripts`) that decides admission on the server;
waiters learn of their admission from the client's inbox (:mod:`.notifier`). The sync
face runs the steps on ``redis``, the asyncio face on ``redis.asyncio``: the same
programs (:mod:`.calls`). The lease keeper and the notifier are threads, with sync
connections of their own, for both faces.

On connection loss: held permits are SUSPENDED while the lease may still be alive,
HELD again when a renewal works, LOST once a session timeout passed without one (the
server has expired the lease, or will) or the lease is found gone; waiters then enter
the queue again with a new lease. ``close()`` deletes the lease: the entries are dead at
once, and the next holders are admitted at once.

Through Sentinel each connection is made to the primary the sentinels name at that
moment (:mod:`.clients`): after a failover the calls fail for a while (connection
errors, retried within their bounds), then reach the new primary; the lease and its
entries carried over if they were replicated, and the session goes on as after a
reconnect. A promoted replica that lacked writes this client saw ends the backend with
StoreHistoryReset (:mod:`.history`).

Honest limits (docs/operations.md): the guarantees hold with one primary writing an
append-only file synced at every write. Under asynchronous replication a failover can
lose recent grants and counter values; ``wait_replicas=N`` makes each acquire wait
until N replicas have the grant (``WAIT``), which narrows that window but does not
close it (Redis replication is not consensus).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .. import _reachability
from ..backend import (
    RESTORED,
    SUSPENDED,
    Backend,
    Capabilities,
    Deadline,
    Enqueued,
    FencedTransaction,
    Program,
    QueueDriver,
    ServiceURL,
    SessionState,
    StoredSemaphore,
    Waiter,
    by_name,
    default_owner,
    run_program,
    session_lost,
    validate_name,
)
from ..errors import (
    BackendUnavailable,
    CorruptState,
    NotSupported,
    SemaphoreError,
    StoreHistoryReset,
)
from . import multi
from .calls import (
    REFUSED,
    TRANSIENT,
    Arg,
    AsyncRunner,
    Command,
    Pause,
    SyncRunner,
    call,
    command,
    retried,
    translate,
)
from .history import StoreHistory, counter_key
from .layout import KeyLayout
from .lease import LeaseKeeper, new_lease_id
from .notifier import Notifier
from .params import DEFAULT_PORT, RedisParams
from .queue import RedisQueue
from .scripts import ScriptName

log = logging.getLogger("semaphore_recipes.redis")

__all__ = [
    "RedisBackend",
    "RedisClusterBackend",
    "SentinelRedisBackend",
    "TlsRedisBackend",
    "TlsRedisClusterBackend",
    "TlsSentinelRedisBackend",
]

T = TypeVar("T")


class RedisBackend(Backend):
    """Semaphores in one Redis server (its primary), over one lease."""

    scheme = "redis"
    capabilities = Capabilities(
        async_face=True,
        slots=True,
        acquire_all=True,
        server_admission=True,
        admission_slots=True,
        drain=True,
        ramp=True,
        revoke=True,
    )
    default_port = DEFAULT_PORT

    def __init__(self, params: RedisParams, *, owner: str | None = None) -> None:
        super().__init__(owner=owner or default_owner(), request_timeout=params.request_timeout)
        self.params = params
        self.lease = new_lease_id()
        # (first: a cluster client maps the slots when made, and may fail here)
        calls, keeping, notifying = _runners(params)
        self.sync = calls
        self.aio: AsyncRunner | None = None
        self._queues: dict[str, weakref.WeakSet[RedisQueue]] = {}
        self._state_lock = threading.Lock()
        self._state = SessionState.CONNECTED
        self._closed = False
        self._reported_lost: str | None = None  # the lease whose end was told
        self._removals_dropped = False  # closed: removals not retried (logged once)
        #: the key prefix of each semaphore's scripts (:mod:`.layout`)
        self.layout = KeyLayout(params.prefix, clustered=params.cluster)
        self.history = StoreHistory(one_server=self.layout.is_global())
        # the key prefixes where the lease ``_leased_for`` exists (one on a single
        # primary; on Redis Cluster one per hash tag in use, made as tags come in use)
        self._leased: set[str] = set()
        self._leased_for = self.lease
        self._failure: str | None = None  # the store's history restarted: why
        self._background = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="semaphore-recipes-redis-bg"
        )
        self.keeper = LeaseKeeper(self, keeping)
        self.notifier = Notifier(self, notifying)
        self._ids = itertools.count()

    # ---- made from a URL -------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> RedisBackend:
        """A backend for a ``redis://`` or ``rediss://`` URL (params.py lists the
        parameters): ValueError before any I/O (and for a database number the server
        says is out of range), BackendUnavailable when the server does not answer within
        ``connect_timeout``, AuthenticationFailed when it refuses."""
        params = RedisParams.from_url(url)
        _reachability.refuse_early("Redis", params.contacts)  # refused: now
        try:
            backend = cls(params, owner=owner)
        except REFUSED as exc:  # (a cluster client asks for COMMAND when made)
            raise translate(exc, _where(params), params) from exc
        except TRANSIENT as exc:
            said = _reachability.diagnose(*_diagnosis_of(params))
            raise BackendUnavailable(f"{_where(params)}: {exc}: {said}") from exc
        try:
            backend.run(backend.probe(Deadline(params.connect_timeout, time.monotonic)))
        except BaseException as exc:
            backend._shut()
            if _unreachable(exc):
                said = _reachability.diagnose(*_diagnosis_of(params))
                raise BackendUnavailable(f"{str(exc).rstrip('.')}: {said}") from exc.__cause__
            raise
        backend._start()
        return backend

    @classmethod
    async def from_url_async(cls, url: ServiceURL, *, owner: str | None = None) -> RedisBackend:
        params = RedisParams.from_url(url)
        await _reachability.refuse_early_async("Redis", params.contacts)
        try:  # (a thread: a cluster client maps the slots when made)
            backend = await asyncio.to_thread(cls, params, owner=owner)
        except REFUSED as exc:
            raise translate(exc, _where(params), params) from exc
        except TRANSIENT as exc:
            said = await _reachability.diagnose_async(*_diagnosis_of(params))
            raise BackendUnavailable(f"{_where(params)}: {exc}: {said}") from exc
        backend.aio = AsyncRunner(backend.params)
        try:
            await backend.aio.run(backend.probe(Deadline(params.connect_timeout, time.monotonic)))
        except BaseException as exc:
            backend._shut()
            await backend.aio.close()
            if _unreachable(exc):
                said = await _reachability.diagnose_async(*_diagnosis_of(params))
                raise BackendUnavailable(f"{str(exc).rstrip('.')}: {said}") from exc.__cause__
            raise
        backend._start()
        return backend

    def _start(self) -> None:
        self.keeper.start()
        self.notifier.start()
        log.info("%s: lease %s", self.describe(), self.lease)

    # ---- running programs: the runner (each step is one program, :mod:`.calls`) -------------
    def run(self, program: Program[T]) -> T:
        """Run ``program`` on the sync connection. A closed (or failed) backend answers
        each request with BackendUnavailable (StoreHistoryReset): a removal takes it
        for one not confirmed (it never raises), every other step raises it."""
        refusal = self.refusal()
        if refusal is not None:
            return run_program(program, _answering(refusal))
        return self.sync.run(program)

    async def run_async(self, program: Program[T]) -> T:
        """:meth:`run`, awaited on the asyncio connection."""
        refusal = self.refusal()
        if refusal is not None:
            return run_program(program, _answering(refusal))  # (nothing to await)
        assert self.aio is not None, "the asyncio face's calls need from_url_async"
        cancels = cancels_pending()
        answer = await self.aio.run(program)
        if cancels_pending() > cancels:
            # redis.asyncio can answer a call whose task was cancelled meanwhile (the
            # request was on the wire): the task must still end (an acquire's cleanup
            # then removes its entry)
            raise asyncio.CancelledError
        return answer

    def new_id(self) -> int:
        """A number for an entry id, never given twice by this backend."""
        return next(self._ids)

    def script(
        self,
        name: ScriptName,
        args: tuple[Arg, ...],
        where: str,
        *,
        deadline: Deadline | None = None,
        retry: bool = True,
        replicas: int = 0,
    ) -> Program[Any]:
        """A program running script ``name`` (:func:`.calls.call`): bounded by a waiting
        acquire's ``deadline`` (AcquireTimeout), else by the request timeout."""
        bound = deadline or Deadline(self.request_timeout, time.monotonic)
        return call(
            name,
            args,
            where=where,
            bound=bound,
            waiting=deadline is not None,
            retry=retry,
            params=self.params,
            replicas=replicas,
            max_wait=self.request_timeout,
        )

    def in_background(self, program: Callable[[], Program[Any]]) -> None:
        """Run ``program()`` on the background thread, tried again until it works or the
        lease is over (a removal: the lease's end removes the entry anyway)."""
        lease = self.lease

        def attempt() -> None:
            while not self._closed and self.lease == lease:
                try:
                    self.sync.run(program())
                    return
                except SemaphoreError as exc:
                    log.info("redis background write failed (%s); trying again", exc)
                    time.sleep(0.5)

        with contextlib.suppress(RuntimeError):  # closed: the lease's end removes the rest
            self._background.submit(attempt)

    def retry_removal(
        self,
        what: str,
        exc: BackendUnavailable,
        program: Callable[[], Program[Any]],
    ) -> None:
        """A removal (``what``) that failed with ``exc``: tried again in the background
        (:meth:`in_background`), with a warning. Not once the backend is closed: its
        close deleted the lease, or the lease runs out, and its entries go with it; a
        client that will never answer again is not retried, and one line says so for
        all the waiters a close woke."""
        if self._closed:
            with self._state_lock:
                first, self._removals_dropped = not self._removals_dropped, True
            if first:
                log.info("%s: not retried, the backend is closed (its lease ends them)", what)
            return
        log.warning("%s failed (%s); retrying", what, exc)
        self.in_background(program)

    def removal(
        self, what: str, first: Program[Any], again: Callable[[], Program[Any]]
    ) -> Program[bool]:
        """Run the removal ``first`` (``what``), within the request timeout: True once
        applied. Not confirmed in time: ``again()`` in the background
        (:meth:`retry_removal`), False. Interrupted (Ctrl-C, a cancelled task, the
        program closed): ``again()`` in the background, and the interrupt goes on (the
        call may or may not have been applied: a removal repeats harmlessly)."""
        try:
            yield from first
        except BackendUnavailable as exc:
            self.retry_removal(what, exc, again)
            return False
        except Exception:
            raise
        except BaseException:
            self.in_background(again)
            raise
        return True

    def await_new_lease(self, old: str, deadline: Deadline) -> Program[None]:
        """Wait (within ``deadline``) until the keeper replaced the lease ``old``."""
        self.keeper.lease_gone()
        while self.lease == old:
            self.check_open()
            if deadline.expired():
                from ..errors import AcquireTimeout

                raise AcquireTimeout(f"{self.describe()}: no new lease in time")
            yield Pause(deadline.cap(0.05))

    def queues(self, name: str | None = None) -> list[RedisQueue]:
        """The open queues (of semaphore ``name``)."""
        with self._state_lock:
            if name is not None:
                return list(self._queues.get(name, ()))
            return [q for found in self._queues.values() for q in found]

    def _new_queue(self, name: str) -> RedisQueue:
        queue = RedisQueue(self, name)
        with self._state_lock:
            self._queues.setdefault(name, weakref.WeakSet()).add(queue)
        return queue

    def inbox_key(self, prefix: str) -> str:
        """The inbox of our lease under key prefix ``prefix``."""
        return f"{prefix}:inbox:{self.lease}"

    # ---- the lease under each key prefix in use (:mod:`.layout`) -----------------------
    def probe(self, bound: Deadline) -> Program[None]:
        """Connect and authenticate, writing nothing (``PING``, sent again within
        ``bound``): the lease comes with the first step that writes (:meth:`leasing`),
        so a user with read-only rights can connect."""
        yield from retried(lambda: Command(("PING",)), self.describe(), bound, params=self.params)

    def lease_prefixes(self) -> list[str]:
        """The key prefixes where the current lease exists."""
        with self._state_lock:
            return sorted(self._leased)

    def note_leased(self, lease: str, prefixes: Sequence[str]) -> None:
        """The lease ``lease`` exists under ``prefixes`` (not noted if replaced since)."""
        with self._state_lock:
            if lease != self.lease:
                return
            if lease != self._leased_for:
                self._leased, self._leased_for = set(), lease
            self._leased.update(prefixes)

    def new_lease(
        self, prefix: str, lease: str, bound: Deadline, where: str | None = None
    ) -> Program[bool]:
        """Make lease ``lease`` under ``prefix``: True made, False it existed (errors
        name ``where``, by default this backend)."""
        args = (prefix, "", lease, int(self.params.session_timeout * 1000), self.owner)
        made = yield from call(ScriptName.NEW_LEASE, args, where=where or self.describe(),
                               bound=bound, params=self.params)  # fmt: skip
        return bool(made)

    def leasing(
        self, prefix: str, deadline: Deadline | None = None, where: str | None = None
    ) -> Program[None]:
        """Make sure the current lease exists under ``prefix``: made by the first step
        that writes there (a semaphore's creating open or first entry: a client that
        only reads makes none; on Redis Cluster, one per hash tag in use). A lease id
        found taken is ours: a reply lost on the way, the id being random."""
        lease = self.lease
        with self._state_lock:
            if lease == self._leased_for and prefix in self._leased:
                return
        bound = deadline or Deadline(self.request_timeout, time.monotonic)
        yield from self.new_lease(prefix, lease, bound, where)
        self.note_leased(lease, [prefix])

    # ---- the session, as the keeper finds it -----------------------------------------------
    def session_suspended(self) -> None:
        with self._state_lock:
            if self._state is not SessionState.CONNECTED:
                return
            self._state = SessionState.SUSPENDED
        self.publish(SUSPENDED)

    def session_restored(self) -> None:
        with self._state_lock:
            if self._state is not SessionState.SUSPENDED:
                return
            self._state = SessionState.CONNECTED
        self.publish(RESTORED)

    def session_ended(
        self, old: str, new: str | None, why: str, prefixes: Sequence[str] = ()
    ) -> None:
        """The lease ``old`` is over (``new`` replaces it, once made, under
        ``prefixes``): permits are LOST, waiters with entries of ``old`` enter the
        queue again."""
        with self._state_lock:
            tell = self._reported_lost != old
            self._reported_lost = old
            if new is not None:
                self.lease = new
                self._leased, self._leased_for = set(prefixes), new
                self._state = SessionState.CONNECTED
            else:
                self._state = SessionState.EXPIRED
        if tell:
            log.warning("redis lease %s ended: %s", old, why)
            self.publish(session_lost(f"the redis lease ended: {why}"))
            self.requeue_waiters(
                lambda entry_id: entry_id is not None and entry_id.startswith(old + ".")
            )
        if new is not None:
            log.info("%s: new lease %s", self.describe(), new)

    def history_restarted(self, reason: str) -> None:
        """The data set's history went back (:mod:`.history`): permits are LOST with
        ``reason``, waiters fail with it, later calls raise StoreHistoryReset; the lease
        keeper makes no new lease."""
        with self._state_lock:
            if self._failure is not None:
                return
            self._failure = reason
            self._state = SessionState.FAILED
        log.error("%s", reason)
        self.keeper.stop()
        self.fail(reason)

    def check_holders(self, runner: SyncRunner) -> None:
        """After a renewal: report watched holder entries that are gone."""
        for queue in self.queues():

            def exists(entry_id: str, token: int, queue: RedisQueue = queue) -> bool:
                raw = runner.client.hget(queue.entries_key(), entry_id)
                return raw is not None and json.loads(raw).get("t") == token

            try:
                queue.check_holders(exists)
            except TRANSIENT:
                return

    # ---- Backend ---------------------------------------------------------------------------
    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[QueueDriver]:
        return self._new_queue(name).open(capacity, adopt_capacity=adopt_capacity, create=create)

    # ---- several semaphores at once: one script creates, one removes (multi.py) ----------
    def check_together(self, names: Sequence[str]) -> None:
        self.layout.of_all(names)  # (Redis Cluster: one hash tag)

    def enqueue_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> Program[dict[str, Enqueued]]:
        return multi.enqueue_all(self, queues, deadline)

    def delete_all(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> Program[None]:
        return multi.delete_all(self, queues)

    def transaction_all(
        self, entries: Sequence[tuple[QueueDriver, str]], token: int
    ) -> FencedTransaction:
        return multi.transaction_all(entries, token)

    def describe(self) -> str:
        return _where(self.params)

    @property
    def session_state(self) -> SessionState:
        with self._state_lock:
            return SessionState.CLOSED if self._closed else self._state

    def session_vouched(self, contact: float) -> bool:
        # (a script does not renew the lease: only the keeper's renewals count)
        return self.keeper.vouched()

    def refusal(self) -> BackendUnavailable | None:
        """Why this backend runs no more requests (closed, or its store's history went
        back), or None."""
        if self._closed:
            return BackendUnavailable(f"the backend of {self.describe()} is closed")
        if self._failure is not None:
            return StoreHistoryReset(self._failure)
        return None

    def check_open(self) -> None:
        """Raise :meth:`refusal`, if any."""
        refusal = self.refusal()
        if refusal is not None:
            raise refusal

    def reading(self, key: str) -> Program[bytes | None]:
        value: bytes | None = yield from command(("GET", key), self.describe(), self.params)
        return value

    def data_key(self, semaphore: str, name: str = "data") -> str:
        prefix = self.layout.of(validate_name(semaphore))
        return f"{prefix}:s:{semaphore}:d:{validate_name(name)}"

    def deleting_semaphore(self, name: str) -> Program[None]:
        # its data keys (SCAN's pages, each deleted as it comes), then the script
        prefix = self.layout.of(name)
        pattern = f"{prefix}:s:{name}:d:*"
        where = self.describe()
        node_of = counter_key(prefix)  # (on a cluster: the node serving the semaphore)
        cursor = 0
        while True:
            scan = ("SCAN", cursor, "MATCH", pattern, "COUNT", 500)
            cursor, keys = yield from command(scan, where, self.params, node_of)
            if keys:
                yield from command(("DEL", *keys), where, self.params, node_of)
            if not cursor:
                break
        bound = Deadline(self.request_timeout, time.monotonic)
        yield from call(ScriptName.DELETE_SEMAPHORE, (prefix, name),
                        where=where, bound=bound, params=self.params)  # fmt: skip

    def listing(self) -> Program[tuple[StoredSemaphore, ...]]:
        # each semaphore's capacity hash, P:s:<name>:cfg (a name has no ':', so a data
        # key P:s:<name>:d:cfg is not one), found by SCAN's pages, then read
        if not self.layout.is_global():
            # (a SCAN per primary, each with its own cursor: not one command)
            raise NotSupported(self.scheme, "list its semaphores on Redis Cluster", "list")
        head = f"{self.layout.prefix}:s:"
        pattern = _glob_escaped(head) + "*:cfg"
        where = self.describe()
        names: set[str] = set()
        cursor = 0
        while True:
            scan = ("SCAN", cursor, "MATCH", pattern, "COUNT", 500)
            cursor, keys = yield from command(scan, where, self.params)
            for key in keys:
                text = key.decode() if isinstance(key, bytes) else str(key)
                name = text[len(head) : -len(":cfg")]
                if ":" not in name:
                    names.add(name)
            if not int(cursor):
                break
        found = []
        for name in sorted(names):
            raw = yield from command(("HGET", f"{head}{name}:cfg", "capacity"), where, self.params)
            if raw is None:
                continue  # deleted meanwhile
            try:
                found.append((name, int(raw)))
            except ValueError:
                raise CorruptState(f"semaphore {name!r}: stored capacity {raw!r}") from None
        return by_name(found)

    def _end_lease(self) -> Program[None]:
        """Delete the lease (our entries are dead at once), then let each open queue
        admit the entries that now fit. No lease made: no entry of ours, nothing to
        write (a reader's close)."""
        bound = Deadline(self.request_timeout, time.monotonic)
        if not self.lease_prefixes():
            return
        for prefix in self.lease_prefixes():
            yield from call(ScriptName.END_LEASE, (prefix, "", self.lease),
                            where=self.describe(), bound=bound, params=self.params)  # fmt: skip
        for name in {q.name for q in self.queues()}:
            yield from call(ScriptName.REMOVE, (self.layout.of(name), name, "", self.lease),
                            where=self.describe(), bound=bound, params=self.params)  # fmt: skip

    def _closing(self) -> bool:
        with self._state_lock:
            if self._closed:
                return False
            self._closed = True
        return True

    def close(self) -> None:
        """Delete the lease (the entries go with it; waiters of others are admitted at
        once) and stop the threads; idempotent. Within the request timeout: when the
        server does not answer, the lease expires after the session timeout."""
        if not self._closing():
            return
        try:
            self.sync.run(self._end_lease())
        except SemaphoreError as exc:
            log.warning("%s: closing: %s", self.describe(), exc)
        self._shut()
        self.fail("the redis backend was closed")

    async def close_async(self) -> None:
        if not self._closing():
            return
        assert self.aio is not None
        try:
            await self.aio.run(self._end_lease())
        except SemaphoreError as exc:
            log.warning("%s: closing: %s", self.describe(), exc)
        self._shut()
        await self.aio.close()
        self.fail("the redis backend was closed")

    def _shut(self) -> None:
        self._closed = True
        self.keeper.stop()
        self.notifier.stop()
        self._background.shutdown(wait=False, cancel_futures=True)
        for runner in (self.sync, self.keeper.runner, self.notifier.runner):
            runner.close()


def _answering(refusal: BackendUnavailable) -> Callable[[object], object]:
    """The answer of a backend that runs no more requests, to each one: ``refusal``."""

    def answer(request: object) -> object:
        raise refusal

    return answer


def cancels_pending() -> int:
    """How many cancellations of the current task are pending (Python 3.11+; 0 before:
    there a swallowed cancellation goes unnoticed until the acquire's deadline)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return int(cancelling()) if cancelling is not None else 0


def _unreachable(exc: BaseException) -> bool:
    """Did connecting fail because the server could not be talked to (no answer, or
    one that is not Redis's), rather than refusing us?"""
    return isinstance(exc, BackendUnavailable) and isinstance(exc.__cause__, TRANSIENT)


def _diagnosis_of(params: RedisParams) -> tuple[str, str, list[tuple[str, int]], bool]:
    """The arguments of :func:`.._reachability.diagnose` for these parameters."""
    return "Redis", _reachability.REDIS, params.contacts, params.tls


def _where(params: RedisParams) -> str:
    """The store, in words (no credentials)."""
    tls = " (TLS)" if params.tls else ""
    if params.cluster:
        nodes = ",".join(f"{host}:{port}" for host, port in params.nodes)
        return f"redis cluster at {nodes}{tls} (prefix {params.prefix})"
    return f"redis at {params.address}/{params.db}{tls} (prefix {params.prefix})"


def _runners(params: RedisParams) -> tuple[SyncRunner, SyncRunner, SyncRunner]:
    """The runners of the calls, the lease keeper and the notifier, each with its own
    connections (none left open when one cannot be made)."""
    made: list[SyncRunner] = []
    try:
        for _ in range(3):
            made.append(SyncRunner(params))
    except BaseException:
        for runner in made:
            runner.close()
        raise
    return made[0], made[1], made[2]


class TlsRedisBackend(RedisBackend):
    """``rediss://``: the same backend, over TLS (``ca``, ``cert``, ``key``)."""

    scheme = "rediss"


class SentinelRedisBackend(RedisBackend):
    """``redis+sentinel://``: the same backend, on the primary Sentinel names."""

    scheme = "redis+sentinel"


class TlsSentinelRedisBackend(RedisBackend):
    """``rediss+sentinel://``: through Sentinel, over TLS (data nodes and sentinels)."""

    scheme = "rediss+sentinel"


class RedisClusterBackend(RedisBackend):
    """``redis+cluster://``: the same backend on Redis Cluster (:mod:`.layout`)."""

    scheme = "redis+cluster"


class TlsRedisClusterBackend(RedisBackend):
    """``rediss+cluster://``: Redis Cluster over TLS."""

    scheme = "rediss+cluster"


def _glob_escaped(text: str) -> str:
    """``text`` matched literally by a SCAN ``MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
