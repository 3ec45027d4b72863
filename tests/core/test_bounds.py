"""``Bounds``: many bounded awaits of one loop on one timer, each ending as it would
under ``asyncio.timeout``."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import pytest

from semaphore_recipes._bounded_await import Bounds

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.uncancel: 3.11")


def counting_timers(loop: asyncio.AbstractEventLoop) -> list[float]:
    """The times of every timer ``loop.call_at`` sets from now on."""
    times: list[float] = []
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        times.append(when)
        return call_at(when, callback, *args, **kwargs)

    loop.call_at = counting  # type: ignore[method-assign,assignment]
    return times


def test_a_call_past_its_deadline_times_out_and_what_it_awaited_is_cancelled() -> None:
    async def main() -> None:
        bounds = Bounds()
        never = asyncio.get_running_loop().create_future()
        start = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await bounds.bounded(never, 0.05)
        assert time.monotonic() - start >= 0.05
        assert never.cancelled()
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        assert await bounds.bounded(asyncio.sleep(0, "next"), 0.05) == "next"  # still bounds

    asyncio.run(main())


def test_calls_one_after_another_share_one_timer() -> None:
    async def main() -> None:
        bounds = Bounds()
        timers = counting_timers(asyncio.get_running_loop())
        for _ in range(100):
            assert await bounds.bounded(asyncio.sleep(0, 1), 10) == 1
        assert len(timers) == 1  # each later deadline is past the timer's: none moved
        await bounds.bounded(asyncio.sleep(0), 1)  # an earlier deadline moves it
        assert len(timers) == 2

    asyncio.run(main())


def test_calls_at_once_each_end_at_their_own_deadline() -> None:
    async def main() -> None:
        bounds = Bounds()
        loop = asyncio.get_running_loop()
        ended: dict[float, float] = {}

        async def call(timeout: float) -> None:
            start = loop.time()
            with pytest.raises(asyncio.TimeoutError):
                await bounds.bounded(loop.create_future(), timeout)
            ended[timeout] = loop.time() - start

        quick = asyncio.create_task(bounds.bounded(asyncio.sleep(0.02, "done"), 0.2))
        await asyncio.gather(call(0.3), call(0.1), call(0.2))
        assert await quick == "done"
        for timeout, took in ended.items():
            assert timeout <= took < timeout + 0.09, ended  # none waited for a later one

    asyncio.run(main())


def test_a_cancel_from_outside_stays_a_cancel() -> None:
    async def main() -> None:
        bounds = Bounds()
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(bounds.bounded(loop.create_future(), 10))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await bounds.bounded(asyncio.sleep(0, "next"), 10) == "next"

    asyncio.run(main())


def test_a_call_on_a_second_loop_is_bounded_though_the_first_closed_with_its_timer_set() -> None:
    """The first loop ends with the timer still set (its only call returned at once),
    so a later call on another loop with a later deadline would have set no timer of
    its own, and waited unbounded."""
    bounds = Bounds()

    async def quick() -> None:
        assert await bounds.bounded(asyncio.sleep(0, 1), 0.2) == 1

    asyncio.run(quick())

    async def waits() -> str:
        try:
            await bounds.bounded(asyncio.get_running_loop().create_future(), 0.3)
        except asyncio.TimeoutError:
            return "bounded"
        return "returned"

    # (an outer bound of its own: without the fix it is the one that ends the wait)
    assert asyncio.run(asyncio.wait_for(waits(), 10)) == "bounded"
