"""Single flight for the etcd backend's programs: one caller does a thing, the others
wait for its turn to end, blocking (sync face) or awaited (asyncio face).

A program that finds the thing already being done yields :class:`AwaitTurn` with the
turn it saw; the backend's runner answers it with :meth:`Turns.wait` or
:meth:`Turns.wait_async`, which return when that turn has ended (or after the
request's timeout: the program then looks again, so a deadline is never overrun).
Used for the lease grant (:meth:`EtcdBackend.lease`) and for the shared read of the
entries below new waiters (:class:`~.queue.EtcdQueue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass

__all__ = ["AwaitTurn", "Turns"]


class Turns:
    """A count of ended turns, under the caller's ``lock``. :meth:`end` is called holding
    the lock; :meth:`wake` after it is released (it sets the asyncio face's event, which
    is only ever awaited in the loop that runs the programs)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._changed = threading.Condition(lock)
        self.turn = 0  # turns ended so far
        self._ended: asyncio.Event | None = None

    def end(self) -> None:
        """The current turn is over (call holding the lock)."""
        self.turn += 1
        self._changed.notify_all()

    def wake(self) -> None:
        """Wake the asyncio face's waiters (call without the lock, after :meth:`end`)."""
        ended, self._ended = self._ended, None
        if ended is not None:
            ended.set()

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
        if self._ended is None:
            self._ended = asyncio.Event()
        with contextlib.suppress(asyncio.TimeoutError):  # (not the builtin before 3.11)
            await asyncio.wait_for(self._ended.wait(), request.timeout)


@dataclass(frozen=True)
class AwaitTurn:
    """Wait (at most ``timeout`` s) while ``turns`` is still at ``turn``."""

    turns: Turns
    turn: int
    timeout: float
