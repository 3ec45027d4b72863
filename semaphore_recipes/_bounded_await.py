"""Awaiting one awaitable for at most so many seconds, without a task of its own.

``asyncio.wait_for`` before Python 3.12 runs what it awaits in a new task: a task made,
and one more turn of the event loop, per bounded call (two per uncontended
acquire+release on Redis). ``asyncio.timeout`` (3.11) cancels the awaiting task itself
at the deadline: the awaitable is cancelled where it waits, exactly as ``wait_for``
cancels its task, so what it does on cancellation (a connection closing itself) is the
same. Python 3.10 keeps ``wait_for``.

:class:`Bounds` does what ``asyncio.timeout`` does for the many short calls of one
runner with one timer between them: ``asyncio.timeout`` schedules a timer and cancels
it at every call, which cost about as much as the rest of an uncontended call's client
work on Redis (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["Bounds", "bounded"]

T = TypeVar("T")

if sys.version_info >= (3, 11):

    async def bounded(awaitable: Awaitable[T], timeout: float | None) -> T:
        """``await awaitable``; TimeoutError (``asyncio.TimeoutError``) after
        ``timeout`` seconds (None: no bound), the awaitable then cancelled."""
        async with asyncio.timeout(timeout):
            return await awaitable

else:  # Python 3.10

    async def bounded(awaitable: Awaitable[T], timeout: float | None) -> T:
        """``await awaitable``; TimeoutError (``asyncio.TimeoutError``) after
        ``timeout`` seconds (None: no bound), the awaitable then cancelled."""
        return await asyncio.wait_for(awaitable, timeout)


class _Call:
    """One bounded await under way: its task, its deadline (loop time), and whether the
    timer cancelled it."""

    __slots__ = ("deadline", "expired", "task")

    def __init__(self, task: asyncio.Task[object], deadline: float) -> None:
        self.task = task
        self.deadline = deadline
        self.expired = False


class Bounds:
    """:func:`bounded` for the calls of one event loop, all watched by one timer.

    The timer is set for the earliest deadline it knows of, and moved only when a call
    with an earlier one starts: calls with the same timeout, one after another, each
    have a later deadline than the timer's and set none. When the timer fires it
    cancels the calls past their deadline (each raises TimeoutError, as under
    ``asyncio.timeout``) and is set again for the earliest call left, if any.

    A call on another loop than the timer's (the first one closed, with the timer
    still set) starts afresh on its own loop: the old timer would never fire.
    """

    def __init__(self) -> None:
        self._calls: set[_Call] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    async def bounded(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        """``await awaitable``; TimeoutError (``asyncio.TimeoutError``) after
        ``timeout`` seconds (None: no bound), the awaitable then cancelled."""
        if timeout is None:
            return await awaitable
        task = asyncio.current_task()
        if task is None or sys.version_info < (3, 11):  # (no Task.uncancel)
            return await bounded(awaitable, timeout)
        loop = task.get_loop()
        if loop is not self._loop:
            self._move_to(loop)
        call = _Call(task, loop.time() + timeout)
        cancelling = task.cancelling()
        self._calls.add(call)
        timer = self._timer
        if timer is None or timer.when() > call.deadline:
            self._set(loop, call.deadline)
        try:
            return await awaitable
        except asyncio.CancelledError:
            # ours, unless someone else cancelled the task too (then theirs wins)
            if call.expired and task.uncancel() <= cancelling:
                raise asyncio.TimeoutError from None
            raise
        finally:
            self._calls.discard(call)

    def _move_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """Forget the timer and the calls of the loop used before (closed, or left)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._calls = {call for call in self._calls if call.task.get_loop() is loop}
        self._loop = loop

    def _set(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        earliest: float | None = None
        for call in self._calls:
            if call.expired:
                continue
            if call.deadline <= now:
                call.expired = True
                call.task.cancel()
            elif earliest is None or call.deadline < earliest:
                earliest = call.deadline
        if earliest is not None:
            self._set(loop, earliest)
