"""One etcd lease (the session) shared by every semaphore of a backend object.

Connection trouble: when keepalives go unacknowledged for 2/3 of the TTL, held permits
are SUSPENDED (the lease may still be alive); they are HELD again when acks return.
When the server says the lease is gone, held permits are LOST (``permit.lost`` set),
waiters re-enter the queue on a fresh lease, and later acquires use that lease.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from .._core.deadline import Deadline
from .._core.names import validate_name, validate_open_capacity
from .._interrupts import call_with_sigint_held
from .._store import SessionHub
from .._url import ServiceURL
from ..errors import (
    AcquireTimeout,
    AuthenticationFailed,
    BackendUnavailable,
    InvalidName,
    PermissionDenied,
)
from ..semaphore import Semaphore
from ..zookeeper.backend import default_owner
from .client import (
    EtcdAuthError,
    EtcdClient,
    EtcdError,
    EtcdLeaseNotFound,
    EtcdUnavailable,
    LeaseKeeper,
    retry_unavailable,
)

if TYPE_CHECKING:
    from .queue import EtcdQueue

log = logging.getLogger("semaphore_recipes.etcd")
T = TypeVar("T")

DEFAULT_PREFIX = "/semaphore_recipes/"
DEFAULT_SESSION_TIMEOUT = 10.0


def validate_prefix(prefix: str) -> str:
    if not prefix.startswith("/") or "\x00" in prefix or "/../" in prefix + "/":
        raise InvalidName(f"invalid etcd key prefix {prefix!r}")
    return prefix if prefix.endswith("/") else prefix + "/"


class EtcdBackend(SessionHub):
    """Semaphores over one etcd client and one lease (the session).

    Built by :func:`semaphore_recipes.connect` from an ``etcd://`` URL. ``close()``
    revokes the lease, which removes this backend's entries at once.
    """

    def __init__(
        self,
        client: EtcdClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        owner: str | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        connect_timeout: float = 15.0,
    ) -> None:
        super().__init__()
        self.client = client
        self.prefix = validate_prefix(prefix)
        self.owner = owner or default_owner()
        self.ttl = max(1, math.ceil(session_timeout))
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
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
        params = url.params
        session_timeout = url.float_param("session_timeout", DEFAULT_SESSION_TIMEOUT)
        connect_timeout = url.float_param("connect_timeout", 15.0)
        prefix = validate_prefix(url.path + "/") if url.path else DEFAULT_PREFIX
        client = EtcdClient(
            [f"{h}:{p}" for h, p in url.hosts],
            timeout=url.float_param("request_timeout", 5.0),
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
                lambda: self.run(
                    lambda: self.client.lease_grant(self.ttl, timeout=deadline.cap(2.0) or 0.001)
                ),
                timeout=deadline.cap(3600.0),
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
        keeper = LeaseKeeper(
            self.client,
            lease_id,
            ttl,
            on_expired=self._lease_expired,
            on_suspended=lambda: self._notify_permits("suspended"),
            on_restored=lambda: self._notify_permits("restored"),
        )
        with self._lock:
            self.lease_id, self._keeper = lease_id, keeper
        log.info("etcd session: lease %x, TTL %d s", lease_id, ttl)
        return lease_id

    def current_lease(self, deadline: Deadline) -> int:
        """The live lease, granting a new one after an expiry (within ``deadline``)."""
        with self._lock:
            if self._closed:
                raise BackendUnavailable("the etcd backend is closed")
            lease_id = self.lease_id
        if lease_id:
            return lease_id
        if deadline.expired():
            raise AcquireTimeout("timed out waiting for a new etcd lease")
        return self._new_lease(deadline)

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
        return f"{lease_id:x}-{slot}"

    def free_entry_slot(self, uid: str) -> None:
        """The entry ``uid`` is deleted (or was never created): its key may serve again."""
        lease_hex, _, slot = uid.partition("-")
        with self._lock:
            self._slots.discard((int(lease_hex, 16), int(slot)))

    def lease_gone(self, lease_id: int) -> None:
        """An operation was refused because ``lease_id`` is gone."""
        with self._lock:
            if self.lease_id != lease_id:
                return
        self._lease_expired()

    def _lease_expired(self) -> None:
        with self._lock:
            if not self.lease_id or self._closed:
                return
            old, self.lease_id = self.lease_id, 0
            keeper, self._keeper = self._keeper, None
        log.warning("etcd lease %x is gone: held permits are lost", old)
        if keeper is not None:
            keeper.stop(timeout=0)
        self._notify_permits("etcd lease expired")
        self._session_lost()

    # ---- registries ----------------------------------------------------------
    def register_queue(self, queue: EtcdQueue) -> None:
        with self._lock:
            self._queues.add(queue)

    # ---- public --------------------------------------------------------------
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
        is none; read permission on the prefix is enough (``status()``, monitoring).
        PermissionDenied when the user's roles refuse it; BackendUnavailable when no
        member answers within the request retries.
        """
        from .queue import EtcdQueue

        validate_name(name)
        checked = validate_open_capacity(capacity, create)
        store = EtcdQueue(self, name, checked, adopt_capacity=adopt_capacity, create=create)
        return Semaphore(store, self, self.owner)

    def permission_denied(self, target: str, exc: BaseException) -> PermissionDenied:
        """The library's error for the etcd layer's ``EtcdAuthError``; ``target`` says
        which keys were refused (``"keys under /prefix/name/"``)."""
        return PermissionDenied("etcd", self.client.user, target, str(exc))

    def close(self) -> None:
        """Revoke the lease (this backend's entries go at once) and close the client."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            keeper, lease_id = self._keeper, self.lease_id
            queues = list(self._queues)
        for queue in queues:
            queue.close()
        self.background.shutdown(wait=True, cancel_futures=False)
        if keeper is not None:
            keeper.stop()
        if lease_id:
            try:
                self.client.lease_revoke(lease_id, timeout=2.0)
            except EtcdLeaseNotFound:
                pass  # already gone (expired, or revoked from outside): nothing to do
            except EtcdError as exc:
                log.warning("could not revoke lease %x (it expires by itself): %s", lease_id, exc)
        self.client.close()

    def __enter__(self) -> EtcdBackend:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _monotonic() -> float:
    import time

    return time.monotonic()
