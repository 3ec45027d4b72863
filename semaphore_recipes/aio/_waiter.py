"""A waiter whose inbox an event loop can await, and the doorbell that wakes it."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

from ..backend import Event, Waiter

T = TypeVar("T")


class Doorbell:
    """Wakes a task of ``loop`` parked in :meth:`wait_for`, from any thread (kazoo's,
    the memory store's caller, the loop itself)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._parked: asyncio.Future[None] | None = None

    def ring(self) -> None:
        """Call after putting what the parked task polls for (see :meth:`wait_for`)."""
        parked = self._parked
        if parked is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._loop.call_soon(_wake, parked)
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(_wake, parked)

    async def wait_for(self, poll: Callable[[], T | None], timeout: float | None) -> T | None:
        """What ``poll()`` (which never blocks) finds, parked until a ring between
        polls; None when ``timeout`` passes."""
        loop = self._loop
        end = None if timeout is None else loop.time() + timeout
        while True:
            found = poll()
            if found is not None:
                return found
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return None
            parked: asyncio.Future[None] = loop.create_future()
            self._parked = parked
            # A ring before _parked was set is seen by this poll; one after reads
            # _parked and wakes us.
            found = poll()
            if found is not None:
                self._parked = None
                return found
            timer = None if left is None else loop.call_later(left, _wake, parked)
            try:
                await parked
            finally:
                self._parked = None
                if timer is not None:
                    timer.cancel()


class AsyncWaiter(Waiter):
    """:class:`~semaphore_recipes.backend.Waiter` for the asyncio face: events are
    posted from any thread into the same thread-safe inbox; a parked task is woken
    through the loop (:class:`Doorbell`)."""

    def __init__(self, weight: int, owner: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(weight, owner)
        self._bell = Doorbell(loop)

    def deliver(self, generation: int, event: Event) -> None:
        super().deliver(generation, event)
        self._bell.ring()

    async def next_event_async(self, timeout: float | None) -> Event | None:
        """The next event of the current generation, or None when ``timeout`` passes."""
        return await self._bell.wait_for(self._poll, timeout)

    def _poll(self) -> Event | None:
        while True:
            try:
                generation, event = self._inbox.get_nowait()
            except queue.Empty:
                return None
            if generation == self.generation:
                return event


def _wake(parked: asyncio.Future[None]) -> None:
    if not parked.done():
        parked.set_result(None)
