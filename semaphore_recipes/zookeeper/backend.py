"""One ZooKeeper session shared by every semaphore of a backend object.

Bounds: opening waits at most ``connect_timeout``; every later call but a waiting
acquire at most ``request_timeout`` (kazoo's async calls with a bounded wait), then
raises BackendUnavailable. If kazoo's connection loop dies (it never reconnects then),
held permits are LOST, waiters raise BackendUnavailable, and so does every later call.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState

from .._core.deadline import Deadline
from .._core.names import join_path, validate_name, validate_root
from .._url import DEFAULT_REQUEST_TIMEOUT, ServiceURL
from ..backend import (
    RESTORED,
    SUSPENDED,
    Backend,
    SessionState,
    default_owner,
    session_lost,
)
from ..errors import AcquireTimeout, AuthenticationFailed, BackendUnavailable, PermissionDenied
from . import _kazoo_compat

if TYPE_CHECKING:
    from .queue import ZooKeeperQueue

log = logging.getLogger("semaphore_recipes.zookeeper")
T = TypeVar("T")

DEFAULT_ROOT = "/semaphore_recipes"
DEFAULT_SESSION_TIMEOUT = 10.0
#: kazoo sends the session timeout as a signed 32-bit number of milliseconds (the server
#: then clamps it to its minSessionTimeout..maxSessionTimeout).
MAX_SESSION_TIMEOUT = (2**31 - 1) / 1000
MIN_SESSION_TIMEOUT = 0.1


class ZooKeeperBackend(Backend):
    """Semaphores over one kazoo client (one ZooKeeper session).

    Build it with :func:`semaphore_recipes.connect` (a ``zookeeper://`` URL, or an
    existing ``KazooClient``, which stays the caller's to stop). ``close()`` releases
    nothing by itself: the session's end removes this backend's entries.
    ``request_timeout`` bounds every call but a waiting acquire (seconds).
    """

    scheme = "zookeeper"

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
        if client.state == KazooState.CONNECTED:
            self._connected.set()
        _kazoo_compat.track_negotiated_session_timeout(client)  # seen from its next connect
        client.add_listener(self._on_state)

    # ---- construction -------------------------------------------------------
    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> ZooKeeperBackend:

        params = dict(url.params)
        session_timeout = url.seconds_param(
            "session_timeout",
            DEFAULT_SESSION_TIMEOUT,
            minimum=MIN_SESSION_TIMEOUT,
            maximum=MAX_SESSION_TIMEOUT,
        )
        connect_timeout = url.connect_timeout()
        request_timeout = url.request_timeout()
        root = validate_root(params.get("root", DEFAULT_ROOT))
        kwargs: dict[str, Any] = {}
        user = params.get("username")
        if user is not None:
            kwargs["auth_data"] = [("digest", f"{user}:{params.get('password', '')}")]
        if params.get("tls", "").lower() in ("1", "true", "yes") or "ca" in params:
            kwargs.update(
                use_ssl=True,
                ca=params.get("ca"),
                certfile=params.get("certfile"),
                keyfile=params.get("keyfile"),
                verify_certs=params.get("verify", "true").lower() not in ("0", "false", "no"),
            )
        hosts = url.hosts_string
        client = KazooClient(hosts=hosts, timeout=session_timeout, **kwargs)
        _kazoo_compat.track_negotiated_session_timeout(client)
        deadline = Deadline(connect_timeout, time.monotonic)
        try:
            # Not client.start(timeout): when it times out it stops the client and waits
            # for kazoo's connection attempt in progress, which is bounded by the session
            # timeout, not by ours.
            client.start_async().wait(connect_timeout)
            if not client.connected:
                raise KazooTimeoutError("no connection")
            if url.path:
                # kazoo wants the chroot to exist before it is used: make it, then apply it
                client.ensure_path_async(url.path).get(timeout=deadline.remaining())
                client.chroot = url.path
            elif user is not None:
                # The server answers the credentials before any later request: this read
                # fails with AuthFailedError when they were refused (no retries follow).
                client.exists_async("/").get(timeout=deadline.remaining())
        except NoAuthError as exc:
            _stop_in_background(client)
            raise PermissionDenied("ZooKeeper", user, url.path, "cannot create the chroot") from exc
        except Exception as exc:
            refused = isinstance(exc, AuthFailedError) or (
                client.client_state == KeeperState.AUTH_FAILED
            )
            _stop_in_background(client)
            if refused:
                raise AuthenticationFailed("ZooKeeper", user, hosts, f"{exc!r}") from exc
            if isinstance(exc, KazooTimeoutError):
                raise BackendUnavailable(
                    f"no ZooKeeper server answered at {hosts} within {connect_timeout:g} s"
                ) from exc
            raise BackendUnavailable(f"cannot use ZooKeeper at {hosts}: {exc}") from exc
        return cls(client, root=root, owner=owner, own_client=True, request_timeout=request_timeout)

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
    ) -> ZooKeeperQueue:
        from .queue import ZooKeeperQueue

        self.check_usable()
        return ZooKeeperQueue(self, name, capacity, adopt_capacity=adopt_capacity, create=create)

    def describe(self) -> str:
        chroot = self.client.chroot or ""
        hosts = ",".join(f"{host}:{port}" for host, port in self.client.hosts)
        return f"ZooKeeper at {hosts}{chroot} (root {self.root})"

    @property
    def session_state(self) -> SessionState:
        if self._closed:
            return SessionState.CLOSED
        if self._failure is not None:
            return SessionState.FAILED
        if self._connected.is_set():
            return SessionState.CONNECTED
        return SessionState.SUSPENDED if self._suspended_session else SessionState.EXPIRED

    @property
    def closed(self) -> bool:
        return self._closed

    def read(self, key: str) -> bytes | None:

        def attempt(deadline: Deadline) -> bytes | None:
            try:
                value, _ = self.answer(self.client.get_async(key), deadline, f"reading {key}")
            except NoNodeError:
                return None
            return bytes(value)

        return self.bounded(attempt, f"reading {key}", key)

    def bounded(self, attempt: Callable[[Deadline], T], what: str, path: str) -> T:
        """Run ``attempt`` (retry-safe) within the request timeout, again after a
        connection loss or a session change (kazoo queues requests made while
        disconnected and sends them on reconnect). BackendUnavailable when the time
        runs out, or when the client cannot be used any more; PermissionDenied (naming
        ``path``) when an ACL refuses it."""

        deadline = Deadline(self.request_timeout, time.monotonic)
        while True:
            self.check_usable()
            try:
                return attempt(deadline)
            except NoAuthError as exc:
                raise self.permission_denied(path, exc) from exc
            except (ConnectionLoss, SessionExpiredError) as exc:
                if deadline.expired():
                    raise BackendUnavailable(
                        f"ZooKeeper unreachable {what} (request timeout "
                        f"{self.request_timeout:g} s): {exc!r}"
                    ) from exc
                time.sleep(deadline.cap(0.05))

    def answer(self, reply: Any, deadline: Deadline, what: str) -> Any:
        """The value of one kazoo reply for a call bounded by the request timeout."""

        try:
            return reply.get(block=True, timeout=deadline.remaining())
        except KazooTimeoutError as exc:
            raise BackendUnavailable(
                f"{what}: no answer from ZooKeeper within the request "
                f"timeout ({self.request_timeout:g} s)"
            ) from exc
        except ConnectionClosedError as exc:
            raise BackendUnavailable("the ZooKeeper client was closed") from exc
        except (KazooException, BackendUnavailable):
            raise
        except Exception as exc:  # kazoo's own failure, e.g. its connection loop dying
            raise BackendUnavailable(f"the ZooKeeper client failed: {exc!r}") from exc

    def data_key(self, semaphore: str, name: str = "data") -> str:
        # "+" is in no entry name (nor any semaphore name): listings skip the node
        return join_path(self.root, validate_name(semaphore), f"+{validate_name(name)}")

    def delete_semaphore(self, name: str) -> None:

        path = join_path(self.root, validate_name(name))

        def attempt(deadline: Deadline) -> None:
            while True:
                try:
                    children = self.answer(self.client.get_children_async(path), deadline, path)
                except NoNodeError:
                    return
                for child in children:
                    with contextlib.suppress(NoNodeError):
                        self.answer(self.client.delete_async(f"{path}/{child}"), deadline, path)
                try:
                    self.answer(self.client.delete_async(path), deadline, path)
                    return
                except (NoNodeError, NotEmptyError):
                    continue  # an entry came meanwhile: again

        self.bounded(attempt, f"deleting {path}", path)

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
        if self._closed:
            return
        self._closed = True
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self.client.remove_listener(self._on_state)
        if self._own_client:
            closing = _stop_in_background(self.client)
            closing.join(self.request_timeout)
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

    def check_usable(self) -> None:
        """BackendUnavailable if this backend is closed or its client can no longer
        reach ZooKeeper (stopped by its owner, or its connection loop died)."""
        if self._closed:
            raise BackendUnavailable("the ZooKeeper backend is closed")
        if self._failure is None and _kazoo_compat.connection_loop_died(self.client):
            self._fail()
        if self._failure is not None:
            raise BackendUnavailable(self._failure)
        if self.client.client_state in (KeeperState.CLOSED, KeeperState.AUTH_FAILED):
            raise BackendUnavailable(f"the kazoo client is {self.client.client_state}")

    def _fail(self) -> None:
        """kazoo's connection loop ended by itself: nothing will reconnect. Permits are
        lost, waiters end with BackendUnavailable; the server expires the session."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = (
                "kazoo's connection loop ended by itself (kazoo logged why): this ZooKeeper "
                "client will not reconnect; its session expires on the server"
            )
        self._connected.clear()
        self._cancel_expiry_timer()
        log.error("%s; held permits are lost, waiters fail", self._failure)
        self.fail(self._failure)

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


def _stop_in_background(client: Any) -> threading.Thread:
    """Stop and close a kazoo client on a thread of its own (returned, started): kazoo's
    stop() waits for its connection thread, which may be in the middle of an attempt
    bounded only by the session timeout."""

    def stop() -> None:
        try:
            client.stop()
            client.close()
        except Exception as exc:  # nothing to tell anyone: the client is being dropped
            log.debug("stopping the kazoo client: %r", exc)

    thread = threading.Thread(target=stop, name="sr-zk-stop", daemon=True)
    thread.start()
    return thread
