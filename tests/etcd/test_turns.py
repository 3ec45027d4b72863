"""``etcd.turns``: the end of a turn that served places up to a bound wakes, on the
asyncio face, the waiters placed up to it and the lowest above (the next to act), not
every waiter; one woken to act next that leaves passes it on. No server needed."""

from __future__ import annotations

import asyncio
import threading

from semaphore_recipes.etcd.turns import AwaitTurn, Turns


def _scenario(act: str) -> list[int]:
    """Ten tasks placed 1..10 wait on one turn; ``act`` ends it; the places woken."""

    async def run() -> list[int]:
        lock = threading.Lock()
        turns = Turns(lock)
        woken: list[int] = []

        async def wait(place: int, timeout: float = 5.0) -> None:
            await turns.wait_async(AwaitTurn(turns, turns.turn, timeout, place=place))
            woken.append(place)

        tasks = {p: asyncio.ensure_future(wait(p)) for p in range(1, 11)}
        await asyncio.sleep(0.01)  # (all waiting)
        with lock:
            turns.end()
        if act == "served up to 4":
            turns.wake(4)
        elif act == "all":
            turns.wake()
        elif act == "the next leaves":
            turns.wake(4)
            tasks[5].cancel()  # woken to act next, cancelled before it ran
            await asyncio.sleep(0.01)
            turns.pass_on()  # (what a leaving waiter does)
        await asyncio.sleep(0.01)
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        return sorted(woken)

    return asyncio.run(run())


def test_a_turn_wakes_those_it_served_and_the_next() -> None:
    assert _scenario("served up to 4") == [1, 2, 3, 4, 5]


def test_a_turn_that_served_no_bound_wakes_every_waiter() -> None:
    assert _scenario("all") == list(range(1, 11))


def test_the_next_one_leaving_passes_its_turn_on() -> None:
    assert _scenario("the next leaves") == [1, 2, 3, 4, 6]


def test_a_placed_waiter_still_ends_at_its_timeout() -> None:
    async def run() -> float:
        turns = Turns(threading.Lock())
        loop = asyncio.get_running_loop()
        started = loop.time()
        await turns.wait_async(AwaitTurn(turns, turns.turn, 0.05, place=1))
        return loop.time() - started

    assert asyncio.run(run()) >= 0.05
