"""The asyncio face's release, cancelled before its removal left the process: the
removal is sent again from a task of its own, with the permit's slot records; an
``acquire_all``'s with every entry of it.

(The contract suite cancels releases at random points on every store; there the first
request has nearly always left already. Here it never does.)
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import semaphore_recipes as sr
from semaphore_recipes import aio
from semaphore_recipes._core.program import Program
from semaphore_recipes.backend import Backend


async def release_cancelled_with_its_request_stuck(
    store: Backend, permit: aio.AsyncPermit | aio.AsyncMultiPermit
) -> None:
    """``await permit.release()`` cancelled while its first program, never sent, waits
    forever (the store's next programs run as ever)."""
    run_async = store.run_async
    stuck = asyncio.Event()

    async def first_one_stuck(program: Program[Any]) -> Any:
        store.run_async = run_async  # type: ignore[method-assign]  # (the next as ever)
        program.close()  # never sent
        stuck.set()
        await asyncio.Event().wait()

    store.run_async = first_one_stuck  # type: ignore[method-assign]
    releasing = asyncio.create_task(permit.release())
    await stuck.wait()
    releasing.cancel()
    await asyncio.gather(releasing, return_exceptions=True)
    assert releasing.cancelled()
    assert permit.state is sr.PermitState.RELEASED


def test_a_release_cancelled_before_its_request_left_is_sent_again() -> None:
    url = f"memory://release-cancelled-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with aio.connect(url) as backend:
            sem = backend.semaphore("s", capacity=2)
            permit = await sem.acquire(slot=True)
            await release_cancelled_with_its_request_stuck(backend.backend, permit)
            # the entry and its slot go: both permits and both slots for the next
            both = await sem.acquire(permits=2, slot=True, timeout=5)
            assert sorted(slot.index for slot in both.slots) == [0, 1]
            await both.release()

    asyncio.run(main())


def test_an_acquire_all_release_cancelled_before_its_request_left_is_sent_again() -> None:
    url = f"memory://release-all-cancelled-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with aio.connect(url) as backend:
            a = backend.semaphore("a", capacity=1)
            b = backend.semaphore("b", capacity=1)
            permit = await backend.acquire_all({a: 1, b: 1})
            await release_cancelled_with_its_request_stuck(backend.backend, permit)
            # both entries go: each semaphore's one permit for the next
            for sem in (a, b):
                await (await sem.acquire(timeout=5)).release()

    asyncio.run(main())
