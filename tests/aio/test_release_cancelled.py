"""The asyncio face's release, cancelled before its removal left the process: the
removal is sent again from a task of its own, with the permit's slot records.

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


def test_a_release_cancelled_before_its_request_left_is_sent_again() -> None:
    url = f"memory://release-cancelled-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with aio.connect(url) as backend:
            sem = backend.semaphore("s", capacity=2)
            permit = await sem.acquire(slot=True)
            store = backend.backend
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
            # the entry and its slot go: both permits and both slots for the next
            both = await sem.acquire(permits=2, slot=True, timeout=5)
            assert sorted(slot.index for slot in both.slots) == [0, 1]
            await both.release()

    asyncio.run(main())
