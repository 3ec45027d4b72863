"""Single flight for the etcd backend's programs: one caller does a thing, the others
wait for its turn to end, blocking (sync face) or awaited (asyncio face).

A program that finds the thing already being done yields :class:`AwaitTurn` with the
turn it saw; the backend's runner answers it with :meth:`Turns.wait` or
:meth:`Turns.wait_async`, which return when that turn has ended (or after the
request's timeout: the program then looks again, so a deadline is never overrun).
Used for the lease grant (:meth:`EtcdBackend.lease`) and for the shared read of the
entries below new waiters (:class:`~.queue.EtcdQueue`).

A waiter may give its ``place`` (the shared read: its entry's token). The end of a turn
that served the places up to some bound then wakes, on the asyncio face, only the
waiters placed up to it and the lowest one above (the next to act), not every one:
thousands of tasks of one loop waiting for a read each, all woken at every turn, cost
that loop more than the reads (docs/benchmarks.md, "Scale").
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import threading
from dataclasses import dataclass

from .._bounded_await import bounded

__all__ = ["AwaitTurn", "Turns"]


class Turns:
    """A count of ended turns, under the caller's ``lock``. :meth:`end` is called holding
    the lock; :meth:`wake` after it is released (it wakes the asyncio face's waiters,
    which are only ever awaited in the loop that runs the programs)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._changed = threading.Condition(lock)
        self.turn = 0  # turns ended so far
        self._ended: asyncio.Event | None = None  # the waiters with no place
        self._placed: dict[int, asyncio.Future[None]] = {}  # place -> its waiter
        self._places: list[int] = []  # a heap of the places (some gone: skipped)

    def end(self) -> None:
        """The current turn is over (call holding the lock)."""
        self.turn += 1
        self._changed.notify_all()

    def wake(self, served_up_to: int | None = None) -> None:
        """Wake the asyncio face's waiters (call without the lock, after :meth:`end`):
        every one, or, given ``served_up_to``, those with no place, those placed up to
        it and the lowest placed above it."""
        ended, self._ended = self._ended, None
        if ended is not None:
            ended.set()
        while self._places and (served_up_to is None or self._places[0] <= served_up_to):
            self._wake_lowest()
        if served_up_to is not None:
            self.pass_on()

    def pass_on(self) -> None:
        """Wake the lowest placed asyncio waiter still waiting (the next to act; also
        when the one woken to act next left without acting)."""
        while self._places and not self._wake_lowest():
            pass

    def _wake_lowest(self) -> bool:
        """Wake the waiter of the lowest place; False when it had left (or waits again
        under a newer entry of the heap)."""
        place = heapq.heappop(self._places)
        waiter = self._placed.pop(place, None)
        if waiter is None or waiter.done():
            return False
        waiter.set_result(None)
        return True

    def notify_all(self) -> None:
        """Wake the blocked waiters without ending the turn, e.g. the backend closed
        (call holding the lock)."""
        self._changed.notify_all()

    def wait(self, request: AwaitTurn) -> None:
        with self._lock:
            if self.turn == request.turn:
                self._changed.wait(request.timeout)

    async def wait_async(self, request: AwaitTurn) -> None:
        if self.turn != request.turn:
            return
        place = request.place
        if place is None:
            if self._ended is None:
                self._ended = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):  # (not the builtin before 3.11)
                await bounded(self._ended.wait(), request.timeout)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._placed[place] = woken
        heapq.heappush(self._places, place)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await bounded(woken, request.timeout)
        finally:
            if self._placed.get(place) is woken:
                del self._placed[place]


@dataclass(frozen=True)
class AwaitTurn:
    """Wait (at most ``timeout`` s) while ``turns`` is still at ``turn``; ``place``: the
    waiter's, for a turn that serves places up to a bound (:meth:`Turns.wake`)."""

    turns: Turns
    turn: int
    timeout: float
    place: int | None = None
