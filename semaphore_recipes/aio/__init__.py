"""The asyncio face: the same semaphores, for asyncio services.

>>> import semaphore_recipes as sr
>>> async def handler():                                               # doctest: +SKIP
...     async with sr.aio.connect("etcd://e1:2379/myapp") as backend:
...         sem = backend.semaphore("db-pool", capacity=10)
...         async with sem.acquire(permits=2, timeout=5.0) as permit:
...             await use_the_database(fence=permit.token)

The contract (FIFO, weights, crash release, fencing, the errors, the URLs) is the sync
face's; cancelling an acquiring task is one more way out that leaves nothing behind.
"""

from __future__ import annotations

from .._permit import PermitState
from .backend import AsyncBackend, connect
from .multi import AsyncMultiPermit
from .permit import AsyncPermit, AsyncTransaction
from .semaphore import Acquiring, AsyncSemaphore

__all__ = [
    "Acquiring",
    "AsyncBackend",
    "AsyncMultiPermit",
    "AsyncPermit",
    "AsyncSemaphore",
    "AsyncTransaction",
    "PermitState",
    "connect",
]
