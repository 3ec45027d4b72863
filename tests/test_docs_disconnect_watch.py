"""The user guide's ``acquire_while_connected`` (asyncio section) does what the guide says:
a request whose client hangs up leaves the queue, one whose client stays is granted.

The helper is plain asyncio (no web framework): it is run here as the guide shows it, on
the test's own memory store, with ``is_disconnected`` a coroutine function of the test.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio

from .doc_blocks import all_blocks


def the_guides_helper() -> dict[str, Any]:
    (block,) = [b for b in all_blocks() if "async def acquire_while_connected(" in b.source]
    namespace: dict[str, Any] = {}
    exec(compile(block.source, block.where, "exec"), namespace)
    return namespace


async def _queue_length(sem: aio.AsyncSemaphore) -> int:
    return len((await sem.status()).waiters)


async def _until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not await condition():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        await asyncio.sleep(0.01)


def test_a_client_that_hangs_up_leaves_the_queue(memory_url: str) -> None:
    helper = the_guides_helper()
    acquire_while_connected, client_gone = helper["acquire_while_connected"], helper["ClientGone"]

    async def scenario() -> None:
        async with aio.connect(memory_url) as backend:
            sem = backend.semaphore("reports", capacity=1)
            holder = await sem.acquire()
            gone = {"hung-up": False, "stays": False}

            def client(name: str) -> Any:
                async def is_disconnected() -> bool:
                    return gone[name]

                return is_disconnected

            hung_up = asyncio.create_task(
                acquire_while_connected(sem, client("hung-up"), timeout=30, poll=0.05)
            )
            stays = asyncio.create_task(
                acquire_while_connected(sem, client("stays"), timeout=30, poll=0.05)
            )

            async def both_wait() -> bool:
                return await _queue_length(sem) == 2

            await _until(both_wait)
            gone["hung-up"] = True
            with pytest.raises(client_gone):
                await asyncio.wait_for(hung_up, 10)

            async def one_waits() -> bool:
                return await _queue_length(sem) == 1

            await _until(one_waits)  # the hung-up request's entry is gone, the other's stays
            assert not stays.done()
            await holder.release()
            permit = await asyncio.wait_for(stays, 10)  # granted: nobody ahead any more
            assert permit.state is aio.PermitState.HELD
            await permit.release()
            assert (await sem.status()).used == 0

    asyncio.run(scenario())


def test_a_timeout_and_a_cancelled_handler_leave_nothing(memory_url: str) -> None:
    acquire_while_connected = the_guides_helper()["acquire_while_connected"]

    async def connected() -> bool:
        return False

    async def scenario() -> None:
        async with aio.connect(memory_url) as backend:
            sem = backend.semaphore("reports", capacity=1)
            holder = await sem.acquire()
            with pytest.raises(sr.AcquireTimeout):
                await acquire_while_connected(sem, connected, timeout=0.2, poll=0.05)
            handler = asyncio.create_task(acquire_while_connected(sem, connected, timeout=30))

            async def waits() -> bool:
                return await _queue_length(sem) == 1

            await _until(waits)
            handler.cancel()  # as a server that does cancel its handler would
            with pytest.raises(asyncio.CancelledError):
                await handler
            assert await _queue_length(sem) == 0
            await holder.release()

    asyncio.run(scenario())
