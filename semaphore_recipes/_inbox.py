"""A FIFO of events that threads post and one waiting thread takes, with a timed take.

Why not ``queue.SimpleQueue``: before Python 3.13, its ``get(timeout=...)`` recomputes
the time left after each wake-up of its internal lock, and passes the result on even
when the deadline has passed meanwhile; a negative wait is an endless one there. With
the short timeouts of an acquire near its deadline on a loaded machine this happened:
``acquire(timeout=0.001)`` waited for good (CI, 2026-11-28). Here each wait is given
the time left, and none once it is gone; ``queue.Queue`` pays a lock on every take and
a ``threading.Condition`` to make, while this takes what is already there lock-free.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from time import monotonic
from typing import Generic, TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(Generic[T]):
    """Unbounded FIFO: :meth:`put` from any thread, :meth:`get` and :meth:`get_nowait`
    raise ``queue.Empty`` as ``queue.SimpleQueue``'s do."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        # Rung (released) by a put, taken by a waiting get: a lock rather than a
        # Condition, which costs more to make than an uncontended acquire's whole use
        self._bell = threading.Lock()
        self._bell.acquire()

    def put(self, item: T) -> None:
        self._items.append(item)
        self._ring()

    def _ring(self) -> None:
        with contextlib.suppress(RuntimeError):  # rung already, and nobody took it yet
            self._bell.release()

    def get_nowait(self) -> T:
        try:
            return self._items.popleft()  # (atomic: no lock for what is there)
        except IndexError:
            raise queue.Empty from None

    def get(self, timeout: float | None = None) -> T:
        """The oldest item, waiting at most ``timeout`` seconds (None: until one comes)."""
        try:
            return self._items.popleft()
        except IndexError:
            pass
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            # A ring may be stale (its item taken without waiting): then the look
            # below finds nothing, and the next wait is a real one
            if deadline is None:
                self._bell.acquire()
            else:
                left = deadline - monotonic()
                if left <= 0:
                    raise queue.Empty
                self._bell.acquire(timeout=left)
            try:
                item = self._items.popleft()
            except IndexError:
                continue
            if self._items:  # (one ring for several puts: the next taker is rung)
                self._ring()
            return item
