"""Fair FIFO distributed counting semaphores on ZooKeeper and etcd v3.

>>> import semaphore_recipes as sr
>>> with sr.connect("zookeeper://127.0.0.1:2181/myapp") as backend:   # doctest: +SKIP
...     sem = backend.semaphore("db-pool", capacity=10)
...     with sem.acquire(timeout=5.0) as permit:
...         use_the_database(fence=permit.token)
"""

from __future__ import annotations

from typing import Any as _Any

from ._core.names import MAX_CAPACITY
from ._core.status import EntryStatus, Status
from .errors import (
    AcquireTimeout,
    AuthenticationFailed,
    BackendUnavailable,
    CapacityMismatch,
    CorruptState,
    InvalidName,
    PermissionDenied,
    PermitLost,
    SemaphoreError,
    SemaphoreNotFound,
    WouldBlock,
)
from .semaphore import Permit, PermitState, Semaphore

__all__ = [
    "MAX_CAPACITY",
    "AcquireTimeout",
    "AuthenticationFailed",
    "BackendUnavailable",
    "CapacityMismatch",
    "CorruptState",
    "EntryStatus",
    "InvalidName",
    "PermissionDenied",
    "Permit",
    "PermitLost",
    "PermitState",
    "Semaphore",
    "SemaphoreError",
    "SemaphoreNotFound",
    "Status",
    "WouldBlock",
    "connect",
]

__version__ = "0.1.0"


def connect(target: _Any, *, owner: str | None = None, root: str | None = None) -> _Any:
    """Connect to a coordination service and return a backend.

    ``target`` is a URL (``zookeeper://h1:2181,h2:2181/chroot?session_timeout=10`` or
    ``etcd://h1:2379,h2:2379/prefix?session_timeout=10``) or an existing, started
    ``KazooClient`` (which stays yours to stop). Raises ValueError on a
    malformed URL before any I/O and BackendUnavailable when no server answers.
    """
    if isinstance(target, str):
        from ._url import parse_url

        url = parse_url(target)
        if url.scheme == "zookeeper":
            from .zookeeper import ZooKeeperBackend

            if root is not None:
                url.params["root"] = root
            return ZooKeeperBackend.from_url(url, owner=owner)
        from .etcd.backend import EtcdBackend

        if root is not None:
            raise ValueError("root= is for ZooKeeper; etcd takes its key prefix from the URL path")
        return EtcdBackend.from_url(url, owner=owner)
    if type(target).__name__ == "KazooClient":
        from .zookeeper import ZooKeeperBackend

        kwargs: dict[str, _Any] = {"owner": owner}
        if root is not None:
            kwargs["root"] = root
        return ZooKeeperBackend(target, **kwargs)
    raise TypeError(f"connect() takes a URL or a KazooClient, not {type(target).__name__}")
