"""Cancellation, the asyncio face's own way out of an acquire, on every store.

Through ``asyncio`` itself (the ``-aio`` parameters of the rest of the contract suite
reach the asyncio face through a blocking view; these tests are native): a task
cancelled at any point of an acquire leaves no entry, and the waiter behind it moves up
as after a release; a release cancelled at any point still removes the entry, and an
``acquire_all``'s release every entry of it.
"""

from __future__ import annotations

import asyncio
import random

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.polling import wait_until


@pytest.fixture
def store(sync_service: Harness) -> Harness:
    """Each selected store (the test drives the asyncio face itself)."""
    return sync_service


async def _turns(rng: random.Random) -> None:
    """A random point in time: some loop turns, sometimes a few milliseconds."""
    for _ in range(rng.randint(0, 15)):
        await asyncio.sleep(0)
    if rng.random() < 0.4:
        await asyncio.sleep(rng.uniform(0, 0.01))


async def _release_cancelled_at_random(
    permit: sr.aio.AsyncPermit | sr.aio.AsyncMultiPermit, rng: random.Random
) -> None:
    """``await permit.release()`` in a task cancelled at a random point (released again
    if the cancel came before the release began)."""
    releasing = asyncio.create_task(permit.release())
    await _turns(rng)
    releasing.cancel()
    await asyncio.gather(releasing, return_exceptions=True)
    if permit.state is sr.PermitState.HELD:
        await permit.release()


def test_cancelling_at_random_points_leaves_nothing_behind(store: Harness) -> None:
    rng = random.Random(1414)

    async def main() -> None:
        async with sr.aio.connect(store.url) as backend:
            sem = backend.semaphore("cancel", capacity=2)
            held = await sem.acquire()  # one permit taken: acquires of 1 may be granted
            for _ in range(60):
                full = rng.random() < 0.5
                blocker = await sem.acquire() if full else None
                task = asyncio.create_task(sem.acquire(timeout=30))
                await _turns(rng)
                task.cancel()
                try:
                    permit = await task  # granted before the cancel landed
                    await permit.release()
                except asyncio.CancelledError:
                    pass
                if blocker is not None:
                    await blocker.release()
                # only the steady holder's entry: nothing of the cancelled acquire is left
                assert len(store.entries("cancel")) == 1
            # no ghost ahead of anyone: the free permit, then both, are granted at once
            async with sem.acquire(blocking=False):
                pass
            await held.release()
            async with sem.acquire(blocking=False), sem.acquire(blocking=False):
                pass

    asyncio.run(main())
    assert store.entries() == []


def test_a_cancelled_waiter_wakes_its_successor_as_a_release_would(store: Harness) -> None:
    async def main() -> None:
        async with sr.aio.connect(store.url) as backend:
            sem = backend.semaphore("successor", capacity=2)
            first, second = await sem.acquire(), await sem.acquire()
            big = asyncio.create_task(sem.acquire(permits=2))  # the head: needs both
            while len((await sem.status()).waiters) < 1:  # (in the queue before the next)
                await asyncio.sleep(0.01)
            small = asyncio.create_task(sem.acquire(timeout=10))  # behind it
            while len((await sem.status()).waiters) < 2:
                await asyncio.sleep(0.01)
            await first.release()  # 1 free, but FIFO: the small one waits behind the big one
            await asyncio.sleep(0.3)
            assert not small.done()
            big.cancel()  # the head leaves: the small one fits now and must be woken
            permit = await asyncio.wait_for(small, 5)
            # the cancelled acquire ends once its delete's reply is in, which may come
            # after the successor, told by the deletion itself, was admitted
            await asyncio.wait([big], timeout=5)
            assert big.cancelled()
            await permit.release()
            await second.release()

    asyncio.run(main())
    assert store.entries() == []


def test_a_cancelled_release_still_removes_the_entry_and_its_slots(store: Harness) -> None:
    """``await permit.release()`` cancelled at a random point: the removal goes on (sent
    again from a task of its own), its slot records with it, so the next acquire of
    the whole capacity is granted both slots; nothing is left."""
    rng = random.Random(2718)

    async def main() -> None:
        async with sr.aio.connect(store.url) as backend:
            sem = backend.semaphore("cancel-release", capacity=2)
            for _ in range(30):
                permit = await sem.acquire(slot=True, timeout=10)
                await _release_cancelled_at_random(permit, rng)
                both = await sem.acquire(permits=2, slot=True, timeout=10)
                assert sorted(slot.index for slot in both.slots) == [0, 1]
                await both.release()

    asyncio.run(main())
    wait_until(lambda: store.entries() == [], timeout=10)


def test_a_cancelled_acquire_all_release_still_removes_every_entry(store: Harness) -> None:
    """``await permit.release()`` of an ``acquire_all`` cancelled at a random point: the
    removal of every entry goes on (sent again from a task of its own: a store's
    removal of them may run twice), so each semaphore's whole capacity is free next."""
    rng = random.Random(3141)

    async def main() -> None:
        async with sr.aio.connect(store.url) as backend:
            a = backend.semaphore("{cancel-all}a", capacity=1)
            b = backend.semaphore("{cancel-all}b", capacity=2)
            for _ in range(20):
                permit = await backend.acquire_all({a: 1, b: 2}, timeout=10)
                await _release_cancelled_at_random(permit, rng)
                await (await a.acquire(timeout=10)).release()
                await (await b.acquire(permits=2, timeout=10)).release()

    asyncio.run(main())
    wait_until(lambda: store.entries() == [], timeout=10)
