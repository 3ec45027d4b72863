"""A waiter whose inbox an event loop can await."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading

from ..backend import Event, Waiter


class AsyncWaiter(Waiter):
    """:class:`~semaphore_recipes.backend.Waiter` for the asyncio face: events are
    posted from any thread (kazoo's, the memory store's caller, the loop itself) into
    the same thread-safe inbox; a parked task is woken through the loop."""

    def __init__(self, weight: int, owner: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(weight, owner)
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._parked: asyncio.Future[None] | None = None

    def post(self, generation: int, event: Event) -> None:
        super().post(generation, event)
        parked = self._parked  # read after the put: see next_event_async
        if parked is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._loop.call_soon(_wake, parked)
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(_wake, parked)

    async def next_event_async(self, timeout: float | None) -> Event | None:
        """The next event of the current generation, or None when ``timeout`` passes."""
        loop = self._loop
        end = None if timeout is None else loop.time() + timeout
        while True:
            try:
                generation, event = self._inbox.get_nowait()
            except queue.Empty:
                pass
            else:
                if generation == self.generation:
                    return event
                continue
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return None
            parked: asyncio.Future[None] = loop.create_future()
            self._parked = parked
            # A post that put its event before _parked was set is seen here; one after
            # reads _parked and wakes us.
            if not self._inbox.empty():
                self._parked = None
                continue
            timer = None if left is None else loop.call_later(left, _wake, parked)
            try:
                await parked
            finally:
                self._parked = None
                if timer is not None:
                    timer.cancel()


def _wake(parked: asyncio.Future[None]) -> None:
    if not parked.done():
        parked.set_result(None)
