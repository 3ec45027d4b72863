"""Handoff from asyncio: a holder's loop releases, a waiting task of another process's
loop is granted (its ``await sem.acquire()`` returns).

The method of ``handoff`` (capacity 1, holder and waiter in two worker processes,
CLOCK_MONOTONIC from the release call to the waiter's task resuming), against the
asyncio predecessor-watch floor (``aio_impls.AioWatchFloor``): one process deletes a
key; the task of the other process's loop awaiting a watch on that key (kazoo
``exists`` watch bridged with ``call_soon_threadsafe``; a ``grpc.aio`` Watch stream) is
woken. Implementations take turns sample by sample.
"""

from __future__ import annotations

from collections.abc import Callable

from .aio_latency import with_async_face
from .config import Run
from .handoff import handoffs
from .results import Results
from .servers import ServerSet

IMPLS_HERE = ("aio-floor-zk", "aio-ours-zk", "aio-floor-etcd", "aio-ours-etcd")
FLOORS = {"aio-ours-zk": "aio-floor-zk", "aio-ours-etcd": "aio-floor-etcd"}


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    impls = with_async_face(IMPLS_HERE, results, "aio-handoff")
    results.aio_handoff += handoffs(run, results, progress, impls, FLOORS, mode="aio-handoff")
