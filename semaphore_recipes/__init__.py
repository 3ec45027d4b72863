"""Fair FIFO distributed counting semaphores on ZooKeeper, etcd v3, Redis, and in memory.

>>> import semaphore_recipes as sr
>>> with sr.connect("zookeeper://127.0.0.1:2181/myapp") as backend:   # doctest: +SKIP
...     sem = backend.semaphore("db-pool", capacity=10)
...     with sem.acquire(timeout=5.0) as permit:
...         use_the_database(fence=permit.token)
"""

from __future__ import annotations

from ._core.listing import StoredSemaphore
from ._core.names import MAX_CAPACITY
from ._core.position import Position
from ._core.ramp import Ramp, RampPlan, parse_ramp
from ._core.slots import Slot
from ._core.status import EntryStatus, Status
from ._revoke import Revoked
from .backend import Backend, FencedTransaction, SessionChange, SessionState
from .client import Client
from .errors import (
    AcquireTimeout,
    AuthenticationFailed,
    BackendNotInstalled,
    BackendUnavailable,
    CapacityMismatch,
    CorruptState,
    Draining,
    DrainTimeout,
    InvalidName,
    NotSupported,
    PermissionDenied,
    PermitLost,
    SemaphoreError,
    SemaphoreNotFound,
    SlotsNotSupported,
    StoreHistoryReset,
    WouldBlock,
    WriteConflict,
)
from .multi import MultiPermit
from .semaphore import Permit, PermitState, Semaphore

__all__ = [
    "MAX_CAPACITY",
    "AcquireTimeout",
    "AuthenticationFailed",
    "Backend",
    "BackendNotInstalled",
    "BackendUnavailable",
    "CapacityMismatch",
    "Client",
    "CorruptState",
    "DrainTimeout",
    "Draining",
    "EntryStatus",
    "FencedTransaction",
    "InvalidName",
    "MultiPermit",
    "NotSupported",
    "PermissionDenied",
    "Permit",
    "PermitLost",
    "PermitState",
    "Position",
    "Ramp",
    "RampPlan",
    "Revoked",
    "Semaphore",
    "SemaphoreError",
    "SemaphoreNotFound",
    "SessionChange",
    "SessionState",
    "Slot",
    "SlotsNotSupported",
    "Status",
    "StoreHistoryReset",
    "StoredSemaphore",
    "WouldBlock",
    "WriteConflict",
    "connect",
    "parse_ramp",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``sr.aio``, the asyncio face, imported on first use (it imports asyncio)
    if name == "aio":
        import importlib

        return importlib.import_module(".aio", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def connect(target: str | object, *, owner: str | None = None, **options: str) -> Client:
    """Connect to a coordination service: the :class:`Client` of a session with it.

    ``target`` is a URL whose scheme picks the backend through
    :mod:`semaphore_recipes.registry` (``zookeeper://h1:2181,h2:2181/chroot?session_timeout=10``,
    ``etcd://h1:2379,h2:2379/prefix?session_timeout=10``, ``memory://NAME``), or a client
    object a backend takes (a started ``KazooClient``, which stays yours to stop).
    ``options`` are URL parameters (``root="/app"`` for ZooKeeper). Raises ValueError on
    a malformed URL or an unknown scheme before any I/O, BackendNotInstalled when the
    scheme's optional dependencies are missing, and BackendUnavailable when no server
    answers.
    """
    from . import registry

    params = {key: str(value) for key, value in options.items() if value is not None}
    if isinstance(target, str):
        url = registry.parse_url(target)
        url.params.update(params)
        return Client(registry.backend_class(url.scheme).from_url(url, owner=owner))
    found = registry.spec_for_client(target)
    if found is None:
        raise TypeError(
            f"connect() takes a URL or a client object a backend knows, not {type(target).__name__}"
        )
    return Client(registry.backend_class(found.scheme).from_client(target, owner=owner, **params))
