"""One ZooKeeper session shared by every semaphore of a backend object.

Bounds: opening waits at most ``connect_timeout`` (at once BackendUnavailable when
every address refuses: :mod:`._refusals`); every later call but a waiting
acquire at most ``request_timeout`` (kazoo's async calls with a bounded wait), then
raises BackendUnavailable. If kazoo's connection loop dies (it never reconnects then),
held permits are LOST, waiters raise BackendUnavailable, and so does every later call.

Connection loss: kazoo reconnects by itself; held permits are SUSPENDED, then HELD again
with the same session, or LOST when the session expired or stayed unreachable for a
whole session timeout; waiters wait for the connection (within their deadline) and keep
their place. Session expiry: waiters enter the queue again with kazoo's new session.
A server that refuses the session because its history is older than the client's (wiped,
or restored from a backup; :mod:`._history`) ends the backend at once, as a dead
connection loop does, with StoreHistoryReset.

Every step is a program (``_waits.py``) that carries its own bound: ``run`` answers it
blocking, ``run_async`` awaited (the asyncio face, as ``from_url_async``); kazoo's state
listener and callback thread wake the event loop (``loop.call_soon_threadsafe``), so no
thread is added per waiting task.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState

from .. import _reachability
from .._core.codec import decode_capacity
from .._core.deadline import Deadline
from .._core.names import join_path, validate_name, validate_root
from .._core.program import Program, run_program, run_program_async
from .._url import DEFAULT_REQUEST_TIMEOUT, ServiceURL
from ..backend import (
    RESTORED,
    SUSPENDED,
    Backend,
    Capabilities,
    Enqueued,
    FencedTransaction,
    QueueDriver,
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
from . import _history, _kazoo_compat, multi
from ._refusals import Refusals
from ._tls import TLS_PARAMETERS, is_certificate_refusal, tls_failure, tls_options
from ._waits import Answering, NoReplyInTime, Pause, Within, ZkProgram, reply_async
from .log_masking import mask_credentials
from .polling import PollingHandler
from .queue import ZooKeeperQueue

log = logging.getLogger("semaphore_recipes.zookeeper")
T = TypeVar("T")
B = TypeVar("B", bound="ZooKeeperBackend")

DEFAULT_ROOT = "/semaphore_recipes"
DEFAULT_SESSION_TIMEOUT = 10.0
#: kazoo sends the session timeout as a signed 32-bit number of milliseconds (the server
#: then clamps it to its minSessionTimeout..maxSessionTimeout).
MAX_SESSION_TIMEOUT = (2**31 - 1) / 1000
MIN_SESSION_TIMEOUT = 0.1
#: What a ``zookeeper://`` URL may say (docs/operations.md); anything else is a ValueError.
URL_PARAMETERS = TLS_PARAMETERS | {
    "session_timeout",
    "connect_timeout",
    "request_timeout",
    "root",
    "username",
    "password",
}
#: The other stores' names for ZooKeeper's parameters, named in the ValueError.
_OTHER_STORES_NAMES = {"cert": "certfile", "key": "keyfile", "user": "username"}


class ZooKeeperBackend(Backend):
    """Semaphores over one kazoo client (one ZooKeeper session).

    Build it with :func:`semaphore_recipes.connect` (a ``zookeeper://`` URL, or an
    existing ``KazooClient``, which stays the caller's to stop). ``close()`` releases
    nothing by itself: the session's end removes this backend's entries.
    ``request_timeout`` bounds every call but a waiting acquire (seconds).
    """

    scheme = "zookeeper"
    capabilities = Capabilities(
        async_face=True, slots=True, acquire_all=True, drain=True, ramp=True, revoke=True
    )
    queue_type = ZooKeeperQueue

    def __init__(
        self,
        client: Any,
        *,
        root: str = DEFAULT_ROOT,
        owner: str | None = None,
        own_client: bool = False,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        super().__init__(owner=owner or default_owner(), request_timeout=request_timeout)

        self.client = client
        self.root = validate_root(root)
        self._own_client = own_client
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._queues: weakref.WeakSet[ZooKeeperQueue] = weakref.WeakSet()
        self._rearm_watches = False  # the session changed: capacity watches died
        self._suspended_session: int | None = None
        self._expiry_timer: threading.Timer | None = None
        self._closed = False
        self._failure: str | None = None  # why this backend can no longer be used
        self._failure_error: type[BackendUnavailable] = BackendUnavailable
        self._checking_history = False  # a thread asks the server for its last zxid
        # tasks of the asyncio face waiting for the connection: (their loop, their future)
        self._connection_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]
        self._connection_waiters = set()
        if client.state == KazooState.CONNECTED:
            self._connected.set()
        _kazoo_compat.track_negotiated_session_timeout(client)  # seen from its next connect
        mask_credentials(client)  # (a client given to connect(): from its next connect)
        _kazoo_compat.on_handshake_closed(client, self._handshake_closed)
        _kazoo_compat.note_swallowed_interrupts(client)  # the runner raises them
        client.add_listener(self._on_state)

    # ---- construction -------------------------------------------------------
    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> ZooKeeperBackend:
        opening = _Opening(url)  # ValueError on a bad parameter, before any I/O
        client = opening.new_client()
        try:
            run_program(opening.connecting(client), opening.wait)
        except Exception as exc:
            diagnosis = None
            if isinstance(exc, KazooTimeoutError):
                diagnosis = _reachability.diagnose(*opening.diagnosis_of(url))
            raise opening.failed(client, exc, diagnosis) from exc
        except BaseException:  # interrupted: the client is not the caller's to stop
            _stop_in_background(client)
            raise
        return opening.backend(cls, client, owner)

    @classmethod
    async def from_url_async(cls, url: ServiceURL, *, owner: str | None = None) -> ZooKeeperBackend:
        """:meth:`from_url` without blocking the event loop: kazoo's connection thread
        connects; a connection listener wakes the loop (within the connect timeout)."""
        opening = _Opening(url)
        client = opening.new_client()
        try:
            await run_program_async(opening.connecting(client), opening.wait_async)
        except Exception as exc:
            diagnosis = None
            if isinstance(exc, KazooTimeoutError):
                diagnosis = await _reachability.diagnose_async(*opening.diagnosis_of(url))
            raise opening.failed(client, exc, diagnosis) from exc
        except BaseException:  # cancelled: the client is not the caller's to stop
            _stop_in_background(client)
            raise
        return opening.backend(cls, client, owner)

    @classmethod
    def from_client(
        cls, client: object, *, owner: str | None = None, **options: str
    ) -> ZooKeeperBackend:
        """A backend over a started ``KazooClient`` of the caller's (who stops it).
        ``options``: ``root`` (default ``/semaphore_recipes``), ``request_timeout``."""
        unknown = sorted(set(options) - {"root", "request_timeout"})
        if unknown:
            raise ValueError(
                f"connect(KazooClient) takes root= and request_timeout=, not {unknown}"
            )
        timeout = ServiceURL("zookeeper", (), "", dict(options)).request_timeout()
        return cls(
            client,
            root=options.get("root", DEFAULT_ROOT),
            owner=owner,
            request_timeout=timeout,
        )

    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> ZkProgram[ZooKeeperQueue]:
        self.check_usable()
        queue = ZooKeeperQueue(self, name)
        opening = queue.opening(capacity, adopt_capacity, create)
        yield from self.within_request_timeout(opening, f"opening {queue.path}", queue.path)
        self.register_queue(queue)
        return queue

    # ---- several semaphores at once: one multi creates, one multi deletes (multi.py)
    def enqueue_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> ZkProgram[dict[str, Enqueued]]:
        return multi.enqueue_all(self, queues, deadline)

    def delete_all(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> ZkProgram[None]:
        return multi.delete_all(self, queues)

    def transaction_all(
        self, entries: Sequence[tuple[QueueDriver, str]], token: int
    ) -> FencedTransaction:
        return multi.transaction_all(entries, token)

    def describe(self) -> str:
        chroot = self.client.chroot or ""
        hosts = ",".join(f"{host}:{port}" for host, port in self.client.hosts)
        tls = " over TLS" if getattr(self.client, "use_ssl", False) else ""
        return f"ZooKeeper at {hosts}{chroot}{tls} (root {self.root})"

    @property
    def session_state(self) -> SessionState:
        if self._closed:
            return SessionState.CLOSED
        if self._failure is not None:
            return SessionState.FAILED
        if self._connected.is_set():
            return SessionState.CONNECTED
        return SessionState.SUSPENDED if self._suspended_session else SessionState.EXPIRED

    def session_vouched(self, contact: float) -> bool:
        # (every request keeps a ZooKeeper session alive, through a lost connection too)
        return vouched_since(contact, self.session_timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def reading(self, key: str) -> ZkProgram[bytes | None]:
        return self.within_request_timeout(lambda: self._reading(key), f"reading {key}", key)

    def _reading(self, key: str) -> ZkProgram[bytes | None]:
        try:
            value, _ = yield self.client.get_async(key)
        except NoNodeError:
            return None
        return bytes(value)

    # ---- the runner: every program carries its bound (_waits.Within) ----------------
    def run(self, program: Program[T]) -> T:
        return run_program(program, Answering(self).wait)

    async def run_async(self, program: Program[T]) -> T:
        """:meth:`run`, awaited: kazoo's callback thread wakes the loop."""
        return await run_program_async(program, Answering(self).wait_async)

    # ---- calls bounded by the request timeout -----------------------------------
    def within_request_timeout(
        self, attempt: Callable[[], ZkProgram[T]], what: str, path: str
    ) -> ZkProgram[T]:
        """The program ``attempt()`` makes (retry-safe), within the request timeout from
        its start, made again after a connection loss or a session change (kazoo queues
        requests made while disconnected and sends them on reconnect). BackendUnavailable
        when the time runs out, or when the client cannot be used any more;
        PermissionDenied (naming ``path``) when an ACL refuses it."""
        deadline = Deadline(self.request_timeout, time.monotonic)
        yield Within(deadline, functools.partial(self._no_answer, what), path)
        while True:
            self.check_usable()
            try:
                return (yield from attempt())
            except (ConnectionLoss, SessionExpiredError) as exc:
                if deadline.expired():
                    raise BackendUnavailable(
                        f"ZooKeeper unreachable {what} (request timeout "
                        f"{self.request_timeout:g} s): {exc!r}"
                    ) from exc
                yield Pause(deadline.cap(0.05))

    def _no_answer(self, what: str) -> BackendUnavailable:
        return BackendUnavailable(
            f"{what}: no answer from ZooKeeper within the request "
            f"timeout ({self.request_timeout:g} s)"
        )

    def data_key(self, semaphore: str, name: str = "data") -> str:
        # "+" is in no entry name (nor any semaphore name): listings skip the node
        return join_path(self.root, validate_name(semaphore), f"+{validate_name(name)}")

    def deleting_semaphore(self, name: str) -> ZkProgram[None]:
        path = join_path(self.root, validate_name(name))
        return self.within_request_timeout(
            lambda: self._deleting_node(path), f"deleting {path}", path
        )

    def listing(self) -> ZkProgram[tuple[StoredSemaphore, ...]]:
        return self.within_request_timeout(self._listing, f"listing {self.root}", self.root)

    def _listing(self) -> ZkProgram[tuple[StoredSemaphore, ...]]:
        try:
            children = yield self.client.get_children_async(self.root)
        except NoNodeError:
            return ()
        names = [child for child in children if _is_name(child)]
        # every read sent at once, then their answers: one round trip, not one per node
        reads = [(name, self.client.get_async(join_path(self.root, name))) for name in names]
        found = []
        for name, pending in reads:
            try:
                raw, _ = yield pending
            except NoNodeError:
                continue  # deleted meanwhile
            found.append((name, decode_capacity(name, raw)))
        return by_name(found)

    def _deleting_node(self, path: str) -> ZkProgram[None]:
        while True:
            try:
                children = yield self.client.get_children_async(path)
            except NoNodeError:
                return
            for child in children:
                with contextlib.suppress(NoNodeError):
                    yield self.client.delete_async(f"{path}/{child}")
            try:
                yield self.client.delete_async(path)
                return
            except (NoNodeError, NotEmptyError):
                continue  # an entry came meanwhile: again

    @property
    def user(self) -> str | None:
        """The digest user the session authenticated as; None: anonymous."""
        for scheme, credential in self.client.auth_data:
            if scheme == "digest":
                return str(credential).partition(":")[0]
        return None

    def permission_denied(self, path: str, exc: BaseException) -> PermissionDenied:
        """The library's error for kazoo's ``NoAuthError`` on ``path`` (chroot-relative)."""
        full = (self.client.chroot or "") + path
        return PermissionDenied("ZooKeeper", self.user, full, f"refused by its ACL ({exc!r})")

    def close(self) -> None:
        """Stop this backend; if it opened the client, close the session (its entries
        go). Returns within the request timeout: if ZooKeeper does not acknowledge the
        close in time, the connection is dropped and the server expires the session
        (and its entries go) after the session timeout."""
        closing = self._begin_close()
        if closing is not None:
            closing.join(self.request_timeout)
            self._end_close(closing)

    async def close_async(self) -> None:
        """:meth:`close`, awaited: kazoo's stop runs on a thread of its own, which wakes
        the loop when it is done."""
        loop = asyncio.get_running_loop()
        stopped: asyncio.Future[None] = loop.create_future()
        closing = self._begin_close(lambda: _wake_threadsafe(loop, stopped))
        if closing is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopped, self.request_timeout)
            self._end_close(closing)

    def _begin_close(self, stopped: Callable[[], None] | None = None) -> threading.Thread | None:
        """Mark the backend closed and start stopping the client if it is ours (the
        thread doing it, which calls ``stopped`` at its end; None: nothing to wait for)."""
        if self._closed:
            return None
        self._closed = True
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self.client.remove_listener(self._on_state)
        self._wake_connection_waiters()
        # Held permits are lost (the session's end takes their entries; a caller's own
        # client keeps its session, and the backend no longer watches it), waiting
        # acquires end.
        self.fail("the backend was closed")
        if not self._own_client:
            return None
        return _stop_in_background(self.client, stopped)

    def _end_close(self, closing: threading.Thread) -> None:
        if closing.is_alive():
            _kazoo_compat.drop_connection(self.client)
            log.warning(
                "ZooKeeper did not acknowledge the close within %g s: connection "
                "dropped; the server expires the session after its timeout",
                self.request_timeout,
            )

    # ---- session ------------------------------------------------------------
    @property
    def session_id(self) -> int | None:
        # kept while disconnected (unlike client_id): SUSPENDED/CONNECTED compare it
        return _kazoo_compat.session_id(self.client)

    @property
    def session_timeout(self) -> float:
        """Seconds: the timeout ZooKeeper negotiated (for a client given already connected,
        the one it asked for until it next connects). Disconnected this long: LOST."""
        return _kazoo_compat.session_timeout(self.client)

    @property
    def failure(self) -> str | None:
        """Why this backend can no longer reach ZooKeeper at all, or None."""
        return self._failure

    def wait_connected(self, deadline: Deadline) -> None:
        """Block until the client is connected, within the caller's deadline."""
        while not self._connected.is_set():
            self.check_usable()
            left = deadline.cap(1.0)
            if left <= 0:
                raise AcquireTimeout("timed out waiting for the ZooKeeper connection")
            self._connected.wait(left)

    @property
    def connected(self) -> bool:
        """Is the client connected right now (as its state listener last heard)?"""
        return self._connected.is_set()

    async def wait_connected_async(self, deadline: Deadline) -> None:
        """:meth:`wait_connected`, awaited: the state listener wakes the loop."""
        loop = asyncio.get_running_loop()
        while not self._connected.is_set():
            self.check_usable()
            left = deadline.cap(1.0)
            if left <= 0:
                raise AcquireTimeout("timed out waiting for the ZooKeeper connection")
            woken: asyncio.Future[None] = loop.create_future()
            waiting = (loop, woken)
            with self._lock:
                self._connection_waiters.add(waiting)
            try:
                if self._connected.is_set():
                    continue  # connected as we registered: the wake-up may have missed us
                timer = loop.call_later(left, _wake, woken)
                try:
                    await woken
                finally:
                    timer.cancel()
            finally:
                with self._lock:
                    self._connection_waiters.discard(waiting)

    def _wake_connection_waiters(self) -> None:
        """Wake every task in :meth:`wait_connected_async` (it checks why itself)."""
        with self._lock:
            waiting = list(self._connection_waiters)
        for loop, woken in waiting:
            _wake_threadsafe(loop, woken)

    def check_usable(self) -> None:
        """BackendUnavailable if this backend is closed or its client can no longer
        reach ZooKeeper (stopped by its owner, or its connection loop died)."""
        if self._closed:
            raise BackendUnavailable("the ZooKeeper backend is closed")
        if self._failure is None and _kazoo_compat.connection_loop_died(self.client):
            self._fail()
        if self._failure is not None:
            raise self._failure_error(self._failure)
        if self.client.client_state in (KeeperState.CLOSED, KeeperState.AUTH_FAILED):
            raise BackendUnavailable(f"the kazoo client is {self.client.client_state}")

    def _fail(
        self, reason: str | None = None, error: type[BackendUnavailable] = BackendUnavailable
    ) -> None:
        """Nothing will reconnect: kazoo's connection loop ended by itself, or (with
        ``reason``) the server refuses this client for good. Permits are lost, waiters
        end with BackendUnavailable, later calls raise ``error``; the server expires the
        session (if it still knows it)."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = reason or (
                "kazoo's connection loop ended by itself (kazoo logged why): this ZooKeeper "
                "client will not reconnect; its session expires on the server"
            )
            self._failure_error = error
        self._connected.clear()
        self._cancel_expiry_timer()
        self._wake_connection_waiters()
        log.error("%s; held permits are lost, waiters fail", self._failure)
        self.fail(self._failure)

    # ---- a store whose history restarted (_history.py) ------------------------------
    def _handshake_closed(self) -> None:
        """A server closed the connection at the handshake (on kazoo's connection
        thread: never block here): ask it, on a thread of its own, whether its history
        went back behind ours. One question at a time."""
        if self.client.use_ssl or _kazoo_compat.last_zxid(self.client) == 0:
            return  # no srvr over TLS; a client that saw nothing cannot be refused for it
        with self._lock:
            if self._checking_history or self._failure is not None or self._closed:
                return
            self._checking_history = True
        threading.Thread(target=self._check_history, name="sr-zk-history", daemon=True).start()

    def _check_history(self) -> None:
        try:
            seen = _kazoo_compat.last_zxid(self.client)
            older = _history.all_older(self.client.hosts, seen)
            if older is None:
                return
            time.sleep(_history.CONFIRM_AFTER)  # not a member catching up: ask again
            older = _history.all_older(self.client.hosts, seen)
            if older is None:
                return
            self._fail(_history.history_reset_reason(*older, seen), StoreHistoryReset)
            if self._own_client:  # it would knock for ever: the servers refuse it
                _stop_in_background(self.client)
        finally:
            with self._lock:
                self._checking_history = False

    def register_queue(self, queue: ZooKeeperQueue) -> None:
        with self._lock:
            self._queues.add(queue)

    def _on_state(self, state: Any) -> None:
        # kazoo calls this from its connection thread: never block here.
        if state == KazooState.SUSPENDED:
            self._connected.clear()
            self._suspended_session = self.session_id
            log.warning(
                "ZooKeeper connection lost; session 0x%x may still be alive",
                self._suspended_session or 0,
            )
            self.publish(SUSPENDED)
            self._start_expiry_timer()
        elif state == KazooState.CONNECTED:
            self._cancel_expiry_timer()
            if self._suspended_session is not None:
                if self.session_id == self._suspended_session:
                    log.info("ZooKeeper reconnected with the same session")
                    self.publish(RESTORED)
                else:
                    self.publish(session_lost("session ended while disconnected"))
            self._suspended_session = None
            if self._rearm_watches:
                # watches died with the old session: re-arm the capacity watches
                self._rearm_watches = False
                with self._lock:
                    queues = list(self._queues)
                for queue in queues:
                    queue.forget_old_session()
                    queue.arm_capacity_watch()
            self._connected.set()
            self._wake_connection_waiters()
        elif state == KazooState.LOST and _kazoo_compat.connection_loop_died(self.client):
            self._fail()
        elif state == KazooState.LOST:
            self._connected.clear()
            self._cancel_expiry_timer()
            self._suspended_session = None
            self._rearm_watches = True
            log.warning("ZooKeeper session lost (expired or closed)")
            self.publish(session_lost("ZooKeeper session expired"))
            self.requeue_waiters()

    def _start_expiry_timer(self) -> None:
        # While disconnected the server may expire the session without telling us; once
        # a whole session timeout has passed, treat held permits as lost (like Curator).
        self._cancel_expiry_timer()
        timer = threading.Timer(self.session_timeout, self._expiry_timer_fired)
        timer.daemon = True
        self._expiry_timer = timer
        timer.start()

    def _cancel_expiry_timer(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None

    def _expiry_timer_fired(self) -> None:
        if not self._connected.is_set():
            self.publish(
                session_lost(
                    f"disconnected for the whole session timeout ({self.session_timeout:g} s)"
                )
            )


def _stop_in_background(client: Any, stopped: Callable[[], None] | None = None) -> threading.Thread:
    """Stop and close a kazoo client on a thread of its own (returned, started): kazoo's
    stop() waits for its connection thread, which may be in the middle of an attempt
    bounded only by the session timeout. ``stopped`` is called at the thread's end."""

    def stop() -> None:
        try:
            client.stop()
            client.close()
        except Exception as exc:  # nothing to tell anyone: the client is being dropped
            log.debug("stopping the kazoo client: %r", exc)
        finally:
            if stopped is not None:
                stopped()

    thread = threading.Thread(target=stop, name="sr-zk-stop", daemon=True)
    thread.start()
    return thread


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


def _wake_threadsafe(loop: asyncio.AbstractEventLoop, woken: asyncio.Future[None]) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
        loop.call_soon_threadsafe(_wake, woken)


@dataclass(frozen=True)
class _Started:
    """Yielded by the connecting program: kazoo's first connection, ``live`` being
    what ``start_async()`` returned (the waits use a state listener instead, which
    they can also wake when every server refused the TLS handshake)."""

    live: threading.Event


@dataclass(frozen=True)
class _Reconnected:
    """Yielded by the connecting program after a connection loss: kazoo connects again
    by itself (to another member, under a new leader); wait for it within the connect
    timeout."""


def _refuse_unknown(params: dict[str, str]) -> None:
    unknown = sorted(set(params) - URL_PARAMETERS)
    if not unknown:
        return
    hints = [f"{_OTHER_STORES_NAMES[p]}, not {p}" for p in unknown if p in _OTHER_STORES_NAMES]
    hint = f" (ZooKeeper says {'; '.join(hints)})" if hints else ""
    raise ValueError(
        f"ZooKeeper URL parameter(s) {', '.join(unknown)} not understood{hint}; "
        f"known: {', '.join(sorted(URL_PARAMETERS))}"
    )


class _RefusedEverywhere(Exception):
    """Raised by the connect's waits: every address refused (:class:`._refusals.Refusals`)."""


class _Opening:
    """``from_url`` and ``from_url_async``: the URL read once (ValueError before any
    I/O), the connecting program both run, its waits and its errors."""

    def __init__(self, url: ServiceURL) -> None:
        params = dict(url.params)
        _refuse_unknown(params)
        self.session_timeout = url.seconds_param(
            "session_timeout",
            DEFAULT_SESSION_TIMEOUT,
            minimum=MIN_SESSION_TIMEOUT,
            maximum=MAX_SESSION_TIMEOUT,
        )
        self.connect_timeout = url.connect_timeout()
        self.request_timeout = url.request_timeout()
        self.root = validate_root(params.get("root", DEFAULT_ROOT))
        self.chroot = url.path
        self.hosts = url.hosts_string
        self.refusals = Refusals(url.hosts)  # (host names resolved here, as kazoo does)
        self.kwargs: dict[str, Any] = {}
        self.user = params.get("username")
        if self.user is not None:
            self.kwargs["auth_data"] = [("digest", f"{self.user}:{params.get('password', '')}")]
        self.kwargs.update(tls_options(params))
        self.deadline: Deadline | None = None
        self._lock = threading.Lock()

    def new_client(self) -> Any:
        if self.refusals.everywhere():  # no host name resolves
            raise self.refusals.error()
        client = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout,
            handler=PollingHandler(),
            **self.kwargs,
        )
        mask_credentials(client)  # before its first Auth packet
        _kazoo_compat.track_negotiated_session_timeout(client)
        _kazoo_compat.on_connection_failed(client, self.refusals.failed)
        self.client = client
        self.deadline = Deadline(self.connect_timeout, time.monotonic)
        # servers that refused the TLS handshake over a certificate: when all have, the
        # waits end at once (retrying does not change that), through these wakers
        self._refused_by: set[tuple[str, int]] = set()
        self._refusal: ssl.SSLError | None = None  # the last of them
        self._refused_everywhere = False
        self._wakers: set[Callable[[], None]] = set()
        self._credentials_refused = False
        _kazoo_compat.add_connect_failure_listener(client, self._connect_failed)
        client.add_listener(self._state_changed)
        return client

    def _state_changed(self, state: Any) -> None:
        """On kazoo's connection thread. Kazoo reports CONNECTED before it sends the
        credentials; a refusal is AUTH_FAILED (then LOST), and CLOSED soon after, when
        kazoo's loop ends: kept here so that no wait misses it."""
        if state != KazooState.LOST or self.client.client_state != KeeperState.AUTH_FAILED:
            return
        with self._lock:
            self._credentials_refused = True
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def _connect_failed(self, host: str, port: int, failure: BaseException) -> None:
        """On kazoo's connection thread, after each failed connection attempt."""
        if not (isinstance(failure, ssl.SSLError) and is_certificate_refusal(failure)):
            return
        with self._lock:
            self._refusal = failure
            self._refused_by.add((host, port))
            if not self._refused_by >= set(self.client.hosts):
                return
            self._refused_everywhere = True
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    @contextlib.contextmanager
    def _waking(self, wake: Callable[[], None]) -> Iterator[bool]:
        """While in the block, ``wake()`` is called when every server refused us over a
        certificate or the server refused the credentials; the block gets whether that
        happened already."""
        with self._lock:
            self._wakers.add(wake)
            refused = self._refused_everywhere or self._credentials_refused
        try:
            yield refused
        finally:
            with self._lock:
                self._wakers.discard(wake)

    def connecting(self, client: Any) -> ZkProgram[None]:
        # Not client.start(timeout): when it times out it stops the client and waits
        # for kazoo's connection attempt in progress, which is bounded by the session
        # timeout, not by ours.
        yield _Started(client.start_async())
        if self.chroot:
            # kazoo wants the chroot to exist before it is used: make it, then apply it
            yield from self._riding_out_connection_loss(
                lambda: client.ensure_path_async(self.chroot)
            )
            client.chroot = self.chroot
        elif self.user is not None:
            # The server answers the credentials before any later request: this read
            # fails with AuthFailedError when they were refused (no retries follow).
            yield from self._riding_out_connection_loss(lambda: client.exists_async("/"))

    def _riding_out_connection_loss(self, request: Callable[[], object]) -> ZkProgram[None]:
        """``request()``, sent again after a connection loss (the member we reached
        died, or a leader election dropped us) once kazoo has connected again: a
        connect during an election succeeds within the connect timeout."""
        while True:
            try:
                yield request()
                return
            except ConnectionLoss:
                assert self.deadline is not None
                left = self.deadline.remaining()
                if left is not None and left <= 0:
                    raise
                yield _Reconnected()

    def _wait_connected(self, timeout: float | None, *, until_lost: bool) -> None:
        """Until kazoo connects (with ``until_lost``, or gives up: LOST), or every server
        refused us over a certificate, or the server refused the credentials; then
        unless connected, the error that says which (KazooTimeoutError for none)."""
        client = self.client
        settled = threading.Event()
        ends = (KazooState.CONNECTED, KazooState.LOST) if until_lost else (KazooState.CONNECTED,)

        def listener(state: Any) -> None:  # on kazoo's connection thread
            if state in ends:
                settled.set()

        client.add_listener(listener)
        self.refusals.on_everywhere(settled.set)  # every address refused the connection
        try:
            with self._waking(settled.set) as refused:
                # a change before the listener was added is seen here
                if not (client.connected or refused or self.refusals.everywhere()):
                    settled.wait(timeout)
        finally:
            client.remove_listener(listener)
        self._raise_unless_connected()

    def _raise_unless_connected(self) -> None:
        client = self.client
        if client.connected:
            return
        if self._credentials_refused:
            raise AuthFailedError()
        if self.refusals.everywhere():
            raise _RefusedEverywhere
        raise KazooTimeoutError("no connection")

    def wait(self, request: object) -> object:
        assert self.deadline is not None
        if isinstance(request, _Started):
            self._wait_connected(self.connect_timeout, until_lost=False)
            return None
        if isinstance(request, _Reconnected):
            self._wait_connected(self.deadline.remaining(), until_lost=True)
            return None
        with self._refused_credentials_named():
            return request.get(timeout=self.deadline.remaining())  # type: ignore[attr-defined]

    async def wait_async(self, request: object) -> object:
        assert self.deadline is not None
        if isinstance(request, (_Started, _Reconnected)):
            await self._started(self.deadline)
            return None
        try:
            with self._refused_credentials_named():
                return await reply_async(request, self.deadline.remaining())
        except NoReplyInTime:
            raise KazooTimeoutError("no answer") from None

    @contextlib.contextmanager
    def _refused_credentials_named(self) -> Iterator[None]:
        """A request sent once kazoo has closed after refused credentials fails with
        ConnectionClosedError: AuthFailedError says why."""
        try:
            yield
        except ConnectionClosedError:
            if self._credentials_refused:
                raise AuthFailedError() from None
            raise

    async def _started(self, deadline: Deadline) -> None:
        """Until the client's first connection (or its end: refused credentials),
        woken by a connection listener; KazooTimeoutError at the connect timeout."""
        client = self.client
        loop = asyncio.get_running_loop()
        settled: asyncio.Future[None] = loop.create_future()

        def listener(state: Any) -> None:  # on kazoo's connection thread
            if state in (KazooState.CONNECTED, KazooState.LOST):
                _wake_threadsafe(loop, settled)

        client.add_listener(listener)
        self.refusals.on_everywhere(lambda: _wake_threadsafe(loop, settled))
        try:
            with self._waking(lambda: _wake_threadsafe(loop, settled)) as refused:
                # A change before the listener was added is seen here.
                if not (client.connected or refused or self.refusals.everywhere()):
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(settled, deadline.remaining())
        finally:
            client.remove_listener(listener)
        self._raise_unless_connected()

    def diagnosis_of(self, url: ServiceURL) -> tuple[str, str, tuple[tuple[str, int], ...], bool]:
        """The arguments of :func:`.._reachability.diagnose` for this URL."""
        return "ZooKeeper", _reachability.ZOOKEEPER, url.hosts, "use_ssl" in self.kwargs

    def failed(self, client: Any, exc: Exception, diagnosis: str | None = None) -> Exception:
        """The library's error for ``exc``, raised while connecting (``diagnosis``: what
        the addresses answered, after a time-out); the client is stopped in the
        background."""
        _kazoo_compat.remove_connect_failure_listener(client, self._connect_failed)
        last_failure = _kazoo_compat.last_connect_failure(client)
        client.remove_listener(self._state_changed)
        _stop_in_background(client)
        if isinstance(exc, _RefusedEverywhere):
            return self.refusals.error()
        if isinstance(exc, NoAuthError):
            return PermissionDenied("ZooKeeper", self.user, self.chroot, "cannot create the chroot")
        if isinstance(exc, AuthFailedError) or self._credentials_refused:
            return AuthenticationFailed("ZooKeeper", self.user, self.hosts, f"{exc!r}")
        if isinstance(exc, KazooTimeoutError):
            # a refusal over a certificate tells more than a later server's silence
            tls = self._refusal or last_failure
            if isinstance(tls, ssl.SSLError):  # kazoo retried it: no error reached us
                return BackendUnavailable(tls_failure(self.hosts, tls))
            if diagnosis:
                said = f": {diagnosis}"
            else:
                said = f" (last attempt: {last_failure})" if last_failure is not None else ""
            return BackendUnavailable(
                f"no ZooKeeper server answered at {self.hosts} within "
                f"{self.connect_timeout:g} s{said}"
            )
        return BackendUnavailable(f"cannot use ZooKeeper at {self.hosts}: {exc}")

    def backend(self, cls: type[B], client: Any, owner: str | None) -> B:
        _kazoo_compat.remove_connect_failure_listener(client, self._connect_failed)
        client.remove_listener(self._state_changed)
        return cls(
            client,
            root=self.root,
            owner=owner,
            own_client=True,
            request_timeout=self.request_timeout,
        )


def _is_name(child: str) -> bool:
    """Is the root's child ``child`` named as a semaphore (not a node of another tool)?"""
    try:
        validate_name(child)
    except InvalidName:
        return False
    return True
