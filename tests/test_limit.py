"""``sem.limit()``, the decorator of both faces, on a real Redis server: the bound holds
across concurrent calls, every way out releases, and bad arguments fail before any I/O."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio


class Overlap:
    """Counts the calls inside at once (thread-safe); ``most`` is the largest count seen."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)

    def leave(self) -> None:
        with self._lock:
            self.inside -= 1


def test_sync_calls_run_at_most_capacity_at_once_and_release_on_every_exit(
    redis_backend: Callable[..., Any],
) -> None:
    sem: sr.Semaphore = redis_backend().semaphore("calls", 2)
    overlap = Overlap()

    @sem.limit(timeout=20)
    def work(fail: bool) -> str:
        """The wrapped function's own docstring."""
        overlap.enter()
        time.sleep(0.05)
        overlap.leave()
        if fail:
            raise RuntimeError("the call failed")
        return "done"

    def call(i: int) -> str:
        try:
            return work(i % 3 == 0)
        except RuntimeError as exc:
            return str(exc)

    with ThreadPoolExecutor(9) as pool:
        results = list(pool.map(call, range(9), timeout=30))
    assert overlap.most == 2
    assert sorted(results) == ["done"] * 6 + ["the call failed"] * 3
    assert work.__doc__ == "The wrapped function's own docstring."
    status = sem.status()
    assert (status.holders, status.waiters) == ((), ())

    called: list[int] = []
    with sem.acquire(2), pytest.raises(sr.AcquireTimeout):
        sem.limit(timeout=0.1)(called.append)(1)
    assert called == []


def test_async_calls_are_bounded_and_cancellation_releases(redis_url: str) -> None:
    async def main() -> None:
        async with aio.connect(redis_url) as backend:
            sem = backend.semaphore("calls", 2)
            overlap = Overlap()

            @sem.limit(timeout=20)
            async def work(seconds: float) -> float:
                overlap.enter()
                try:
                    await asyncio.sleep(seconds)
                finally:
                    overlap.leave()
                return seconds

            assert await asyncio.gather(*(work(0.05) for _ in range(8))) == [0.05] * 8
            assert overlap.most == 2

            # cancelled inside the function, and while waiting behind it: nothing stays
            inside = asyncio.create_task(work(60))
            second = asyncio.create_task(work(60))
            waiting = asyncio.create_task(work(60))
            while len((await sem.status()).waiters) < 1:
                await asyncio.sleep(0.02)
            for task in (inside, second, waiting):
                task.cancel()
            await asyncio.gather(inside, second, waiting, return_exceptions=True)
            status = await sem.status()
            assert (status.holders, status.waiters) == ((), ())

    asyncio.run(main())


@pytest.fixture
def memory_backend() -> Iterator[sr.Client]:
    backend = sr.connect("memory://")
    yield backend
    backend.close()


def test_bad_arguments_and_kinds_fail_when_the_decorator_is_made(
    memory_backend: sr.Client,
) -> None:
    sem = memory_backend.semaphore("kinds", 2)
    with pytest.raises(ValueError):
        sem.limit(permits=3)
    with pytest.raises(TypeError):
        sem.limit(permits="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sem.limit(timeout=-1)

    async def coroutine_function() -> None: ...

    def generator_function() -> Iterator[int]:
        yield 1

    with pytest.raises(TypeError, match="plain functions"):
        sem.limit()(coroutine_function)
    with pytest.raises(TypeError, match="generator"):
        sem.limit()(generator_function)

    async def on_the_asyncio_face() -> None:
        backend = await aio.connect("memory://")
        # the semaphore is not opened: the checks are made before any I/O
        unopened = backend.semaphore("kinds", 2)
        with pytest.raises(ValueError):
            unopened.limit(permits=0)
        with pytest.raises(ValueError):
            unopened.limit(timeout=float("nan"))
        with pytest.raises(TypeError, match="coroutine functions"):
            unopened.limit()(len)  # type: ignore[arg-type]
        assert unopened.capacity == 2  # (the asked one: never opened)
        await backend.close()

    asyncio.run(on_the_asyncio_face())
