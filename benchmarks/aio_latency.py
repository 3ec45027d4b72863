"""Uncontended acquire+release from asyncio, each implementation on a worker's loop.

The same rounds as ``latency`` (every worker connected at once, one batch each in
turn, the server's request counters read around every batch), with the asyncio face
against the asyncio floors of ``aio_impls``: kazoo's async create+delete awaited from
the loop, and a ``grpc.aio`` put with a lease + delete. ``memory://`` is measured too
(the face's own cost; no floor, no server).
"""

from __future__ import annotations

from collections.abc import Callable

from .aio_impls import async_face_missing
from .config import Run
from .impls import IMPLS
from .latency import batches
from .results import Results
from .servers import ServerSet

IMPLS_HERE = ("aio-raw-zk", "aio-ours-zk", "aio-raw-etcd", "aio-ours-etcd", "aio-ours-memory")
FLOORS = {"aio-ours-zk": "aio-raw-zk", "aio-ours-etcd": "aio-raw-etcd"}


def with_async_face(impls: tuple[str, ...], results: Results, what: str) -> list[str]:
    """``impls`` whose backend has an asyncio face here; a skip note for each other
    backend (its floor is skipped with it: a ratio needs both)."""
    missing = {}
    for impl in impls:
        backend = IMPLS[impl][0]
        if backend not in missing:
            missing[backend] = async_face_missing(backend)
    for backend, why in missing.items():
        if why is not None:
            results.skip(f"{what}: {backend}", why)
    return [impl for impl in impls if missing[IMPLS[impl][0]] is None]


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    impls = with_async_face(IMPLS_HERE, results, "aio-latency")
    results.aio_latency += batches(
        run, servers, results, progress, impls, FLOORS, mode="aio-latency"
    )
