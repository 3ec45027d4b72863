"""A process that acquires and releases for as long as it runs keeps a bounded memory.

A long-running service cycles one semaphore millions of times; anything the library
keeps per acquire and never drops grows without end. (It did: ZooKeeper kept the name
of every entry it had deleted, about 100 bytes a cycle, while a client cycled alone.)
``tracemalloc`` counts the library's own allocations alive after a window of cycles,
once every bounded record of the stores is full (the warm-up): what is left is growth.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.store_selection import harness_fixture

# cycles before the window: past the largest bounded record a store keeps (ZooKeeper's
# names known gone, 4,096, whose table settles at its size after about 5,500 names;
# every client-side driver's admitted views, 1,024)
WARM_UP = {"zookeeper": 7_000, "etcd": 1_100, "memory": 1_100}
WINDOW = 2_000
MOST_BYTES_PER_CYCLE = 16  # a leak of one entry name a cycle is about 100

LIBRARY = [tracemalloc.Filter(True, "*semaphore_recipes*")]


@pytest.fixture(params=["zookeeper", "etcd", "redis", "postgresql", "mysql", "memory"])
def store(request: pytest.FixtureRequest) -> Harness:
    harness: Harness = request.getfixturevalue(harness_fixture(request.param))
    return harness


def test_cycling_alone_keeps_a_bounded_memory(store: Harness) -> None:
    tracemalloc.start(1)
    try:
        backend = sr.connect(store.url)
        try:
            sem = backend.semaphore("growth", capacity=2)
            for _ in range(WARM_UP.get(store.kind, 300)):
                sem.acquire().release()
            gc.collect()
            before = tracemalloc.take_snapshot().filter_traces(LIBRARY)
            for _ in range(WINDOW):
                sem.acquire().release()
            gc.collect()
            after = tracemalloc.take_snapshot().filter_traces(LIBRARY)
        finally:
            backend.close()
    finally:
        tracemalloc.stop()
    grown = after.compare_to(before, "lineno")
    per_cycle = sum(stat.size_diff for stat in grown) / WINDOW
    largest = "; ".join(str(stat) for stat in grown[:3])
    assert per_cycle <= MOST_BYTES_PER_CYCLE, f"{per_cycle:.1f} B a cycle: {largest}"
