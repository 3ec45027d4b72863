"""A waiter that gives up admits the waiters its entry held back at once, on both faces.

Its removal is followed by a sweep of the queue (in the same script, or sent once the
acquire has ended: ``RedisQueue.abandon``); without it, the waiter behind it would be
admitted only by its next timed look, at the lease's expiry (a session timeout away).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio
from semaphore_recipes.testing.redis_harness import RedisHarness

from ..conftest import wait_until

#: far beyond the bound below: a timed look cannot be what admits the successor
SESSION_TIMEOUT = 30
GIVES_UP_AFTER = 1.5


def _give_up(url: str, face: str, decided: threading.Event) -> None:
    """A waiter of weight 2 on ``face`` that times out (capacity 2, one permit held),
    its backend kept open until ``decided`` (its close would sweep too)."""
    if face == "sync":
        with sr.connect(url) as backend:
            with pytest.raises(sr.AcquireTimeout):
                backend.semaphore("swept", capacity=2).acquire(2, timeout=GIVES_UP_AFTER)
            decided.wait(10)
        return

    async def scenario() -> None:
        async with aio.connect(url) as backend:
            with pytest.raises(sr.AcquireTimeout):
                await backend.semaphore("swept", capacity=2).acquire(2, timeout=GIVES_UP_AFTER)
            await asyncio.to_thread(decided.wait, 10)

    asyncio.run(scenario())


@pytest.mark.parametrize("face", ["sync", "aio"])
def test_a_waiter_that_gives_up_admits_the_one_behind_it_at_once(
    redis_harness: RedisHarness, face: str
) -> None:
    url = redis_harness.url_with(session_timeout=SESSION_TIMEOUT)
    with sr.connect(url) as holder, sr.connect(url) as other:
        held = holder.semaphore("swept", capacity=2).acquire(timeout=5)
        successor = other.semaphore("swept", capacity=2)
        outcome: list[Any] = []
        decided = threading.Event()  # the successor's acquire has returned or raised
        giving_up = threading.Thread(target=_give_up, args=(url, face, decided))
        giving_up.start()
        wait_until(lambda: len(successor.status().waiters) == 1, timeout=5)

        def wait() -> None:  # queued behind the weight-2 waiter: FIFO holds it back
            try:
                outcome.append(successor.acquire(timeout=GIVES_UP_AFTER + 2.5))
            except sr.SemaphoreError as exc:
                outcome.append(exc)
            finally:
                decided.set()

        waiting = threading.Thread(target=wait)
        waiting.start()
        wait_until(lambda: len(successor.status().waiters) == 2, timeout=1)  # behind it
        waiting.join(10)
        giving_up.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], sr.Permit), outcome
        outcome[0].release()
        held.release()
