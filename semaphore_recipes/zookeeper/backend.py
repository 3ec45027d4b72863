"""One ZooKeeper session shared by every semaphore of a backend object."""

from __future__ import annotations

import logging
import os
import socket
import threading
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._core.deadline import Deadline
from .._core.names import validate_name, validate_open_capacity, validate_root
from .._store import SessionHub
from .._url import ServiceURL
from ..errors import AcquireTimeout, AuthenticationFailed, BackendUnavailable, PermissionDenied
from ..semaphore import Semaphore

if TYPE_CHECKING:
    from .queue import ZooKeeperQueue

log = logging.getLogger("semaphore_recipes.zookeeper")

DEFAULT_ROOT = "/semaphore_recipes"
DEFAULT_SESSION_TIMEOUT = 10.0


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class ZooKeeperBackend(SessionHub):
    """Semaphores over one kazoo client (one ZooKeeper session).

    Build it with :func:`semaphore_recipes.connect` (a ``zookeeper://`` URL, or an
    existing ``KazooClient``, which stays the caller's to stop). ``close()`` releases
    nothing by itself: the session's end removes this backend's entries.
    """

    def __init__(
        self,
        client: Any,
        *,
        root: str = DEFAULT_ROOT,
        owner: str | None = None,
        own_client: bool = False,
    ) -> None:
        super().__init__()
        from kazoo.protocol.states import KazooState

        self._KazooState = KazooState
        self.client = client
        self.root = validate_root(root)
        self.owner = owner or default_owner()
        self._own_client = own_client
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._queues: weakref.WeakSet[ZooKeeperQueue] = weakref.WeakSet()
        self._rearm_watches = False  # the session changed: capacity watches died
        self._suspended_session: int | None = None
        self._expiry_timer: threading.Timer | None = None
        self._closed = False
        if client.state == KazooState.CONNECTED:
            self._connected.set()
        client.add_listener(self._on_state)

    # ---- construction -------------------------------------------------------
    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> ZooKeeperBackend:
        from kazoo.client import KazooClient
        from kazoo.exceptions import AuthFailedError, NoAuthError
        from kazoo.handlers.threading import KazooTimeoutError
        from kazoo.protocol.states import KeeperState

        params = dict(url.params)
        session_timeout = url.float_param("session_timeout", DEFAULT_SESSION_TIMEOUT)
        connect_timeout = url.float_param("connect_timeout", 15.0)
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
        try:
            client.start(timeout=connect_timeout)
            # The server answers the credentials before any later request: this read
            # fails with AuthFailedError when they were refused (no retries follow).
            if url.path:
                # kazoo wants the chroot to exist before it is used: make it, then apply it
                client.ensure_path(url.path)
                client.chroot = url.path
            elif user is not None:
                client.exists("/")
        except NoAuthError as exc:
            client.stop()
            client.close()
            raise PermissionDenied("ZooKeeper", user, url.path, "cannot create the chroot") from exc
        except Exception as exc:
            refused = isinstance(exc, AuthFailedError) or (
                client.client_state == KeeperState.AUTH_FAILED
            )
            client.stop()
            client.close()
            if refused:
                raise AuthenticationFailed("ZooKeeper", user, hosts, f"{exc!r}") from exc
            if isinstance(exc, KazooTimeoutError):
                raise BackendUnavailable(
                    f"no ZooKeeper server answered at {hosts} within {connect_timeout:g} s"
                ) from exc
            raise BackendUnavailable(f"cannot use ZooKeeper at {hosts}: {exc}") from exc
        return cls(client, root=root, owner=owner, own_client=True)

    def semaphore(
        self,
        name: str,
        capacity: int | None = None,
        *,
        adopt_capacity: bool = False,
        create: bool = True,
    ) -> Semaphore:
        """The semaphore ``name``; created with ``capacity`` if it does not exist.

        Raises CapacityMismatch if it is stored with another capacity (unless
        ``adopt_capacity``), InvalidName/ValueError on bad input before any I/O.
        With ``create=False`` nothing is written: an existing semaphore is opened
        (``capacity`` None: the stored one) and SemaphoreNotFound is raised when there
        is none; read permission on its node is enough (``status()``, monitoring).
        PermissionDenied when an ACL refuses the session; BackendUnavailable when the
        connection is lost meanwhile.
        """
        from .queue import ZooKeeperQueue

        validate_name(name)
        checked = validate_open_capacity(capacity, create)
        store = ZooKeeperQueue(self, name, checked, adopt_capacity=adopt_capacity, create=create)
        return Semaphore(store, self, self.owner)

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
        """Stop this backend; if it opened the client, close the session (its entries go)."""
        if self._closed:
            return
        self._closed = True
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self.client.remove_listener(self._on_state)
        if self._own_client:
            self.client.stop()
            self.client.close()

    def __enter__(self) -> ZooKeeperBackend:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- session ------------------------------------------------------------
    @property
    def session_id(self) -> int | None:
        # kazoo's public client_id is None while disconnected; _session_id keeps the
        # session we are trying to resume, which is what SUSPENDED/CONNECTED compare.
        sid = getattr(self.client, "_session_id", None)
        return int(sid) if sid else None

    @property
    def session_timeout(self) -> float:
        return float(self.client._session_timeout) / 1000.0

    def wait_connected(self, deadline: Deadline) -> None:
        """Block until the client is connected, within the caller's deadline."""
        while not self._connected.is_set():
            if self._closed or self.client.state == "CLOSED":
                raise BackendUnavailable("the ZooKeeper backend is closed")
            left = deadline.cap(1.0)
            if left <= 0:
                raise AcquireTimeout("timed out waiting for the ZooKeeper connection")
            self._connected.wait(left)

    def register_queue(self, queue: ZooKeeperQueue) -> None:
        with self._lock:
            self._queues.add(queue)

    def _on_state(self, state: Any) -> None:
        # kazoo calls this from its connection thread: never block here.
        KazooState = self._KazooState
        if state == KazooState.SUSPENDED:
            self._connected.clear()
            self._suspended_session = self.session_id
            log.warning(
                "ZooKeeper connection lost; session 0x%x may still be alive",
                self._suspended_session or 0,
            )
            self._notify_permits("suspended")
            self._start_expiry_timer()
        elif state == KazooState.CONNECTED:
            self._cancel_expiry_timer()
            if self._suspended_session is not None:
                if self.session_id == self._suspended_session:
                    log.info("ZooKeeper reconnected with the same session")
                    self._notify_permits("restored")
                else:
                    self._notify_permits("session ended while disconnected")
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
        elif state == KazooState.LOST:
            self._connected.clear()
            self._cancel_expiry_timer()
            self._suspended_session = None
            self._rearm_watches = True
            log.warning("ZooKeeper session lost (expired or closed)")
            self._notify_permits("ZooKeeper session expired")
            self._session_lost()

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
            self._notify_permits(
                f"disconnected for the whole session timeout ({self.session_timeout:g} s)"
            )
