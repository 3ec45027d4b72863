"""Many waiters of one process drain without listing the queue again, on every store.

Thousands of tasks of one event loop on one semaphore, each holding for no time: a
waiter's predecessor is admitted and gone before the waiter has read its held mark, at
nearly every grant. The view that predecessor was admitted with is known to their shared
driver (``QueueDriver.admitted_view``), so the waiter learns from it what the mark
would have told, and needs no fresh listing: on ZooKeeper a listing is the whole queue,
which made a drain of W waiters cost O(W²) (docs/design.md sections 2 and 9).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

import semaphore_recipes as sr
from semaphore_recipes.instrumentation import Instrumentation
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.store_selection import harness_fixture

WAITERS = 200  # more than a view keeps (MAX_MARK_KEYS): views far back are truncated
CAPACITY = 2


@pytest.fixture(params=["zookeeper", "etcd", "memory"])
def store(request: pytest.FixtureRequest) -> Harness:
    harness: Harness = request.getfixturevalue(harness_fixture(request.param))
    return harness


class Counts(Instrumentation):
    """The acquires started and the re-lists sent to the store."""

    def __init__(self) -> None:
        self.started = itertools.count()
        self.listed = itertools.count()

    def acquire_started(self, name: str, permits: int) -> None:
        next(self.started)

    def queue_listed(self, name: str) -> None:
        next(self.listed)


def test_a_drain_of_one_process_lists_the_queue_once_per_waiter(store: Harness) -> None:
    counts = Counts()

    async def main() -> list[int]:
        async with sr.aio.connect(store.url) as backend:
            backend.instrument(counts)
            sem = backend.semaphore("drain", capacity=CAPACITY)
            await sem.open()
            gate = asyncio.Event()
            tokens: list[int] = []

            async def one() -> None:
                permit = await sem.acquire(timeout=120)
                tokens.append(permit.token)
                if len(tokens) <= CAPACITY:
                    await gate.wait()  # the first holders stay until all are queued
                await permit.release()

            tasks = [asyncio.ensure_future(one()) for _ in range(WAITERS)]
            while len((await sem.status()).waiters) < WAITERS - CAPACITY:
                await asyncio.sleep(0.02)
            gate.set()
            await asyncio.gather(*tasks)
            return tokens

    tokens = asyncio.run(main())
    assert len(tokens) == WAITERS == len(set(tokens))
    assert next(counts.started) == WAITERS
    # every grant learnt its predecessor's view from the driver: no listing again
    assert next(counts.listed) == 0
    assert store.entries("drain") == []
