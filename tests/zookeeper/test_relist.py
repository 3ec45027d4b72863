"""A drain across clients re-lists from what each client knows of the queue
(``zookeeper/_known_queue.py``), not from the server: at W waiters a listing sends back
every entry, O(W) bytes, and a drain across processes re-lists at a rate that does not
fall with W."""

from __future__ import annotations

import asyncio
from typing import Any

from semaphore_recipes import aio
from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness
from semaphore_recipes.zookeeper.backend import ZooKeeperBackend

WAITERS = 400  # past the 64 entries a view keeps: views far back are truncated


def count_listings(backend: aio.AsyncBackend, counts: dict[str, int], name: str) -> None:
    zk_backend = backend.backend
    assert isinstance(zk_backend, ZooKeeperBackend)
    client = zk_backend.client
    real = client.get_children_async

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return real(*args, **kwargs)

    client.get_children_async = counted


def test_a_drain_across_two_clients_lists_the_queue_a_bounded_number_of_times(
    zk: ZooKeeperHarness,
) -> None:
    async def main() -> dict[str, int]:
        counts = {"a": 0, "b": 0}
        async with aio.connect(zk.url) as a, aio.connect(zk.url) as b:
            count_listings(a, counts, "a")
            count_listings(b, counts, "b")
            sems = [a.semaphore("relist", capacity=1), b.semaphore("relist", capacity=1)]
            first = await sems[0].acquire(timeout=10)

            async def once(i: int) -> None:
                permit = await sems[i % 2].acquire(timeout=60)
                await permit.release()

            # the two clients' entries alternate: most handoffs cross clients, where
            # no driver hands its successor the view it was admitted with
            tasks = []
            for i in range(WAITERS):
                tasks.append(asyncio.create_task(once(i)))
                while len(zk.entries("relist")) < i + 2:
                    await asyncio.sleep(0.002)
            counts.update(a=0, b=0)
            await first.release()
            await asyncio.wait_for(asyncio.gather(*tasks), 120)
            return counts

    counts = asyncio.run(main())
    # Without the record, each stale view far back listed the whole queue (W children).
    assert counts["a"] + counts["b"] <= 4, counts
