"""A FIFO of events that threads post and one waiting thread takes, with a timed take.

Why not ``queue.SimpleQueue``: before Python 3.13, its ``get(timeout=...)`` recomputes
the time left after each wake-up of its internal lock, and passes the result on even
when the deadline has passed meanwhile; a negative wait is an endless one there. With
the short timeouts of an acquire near its deadline on a loaded machine this happened:
``acquire(timeout=0.001)`` waited for good (CI, 2026-11-28). ``threading.Condition``'s
timed wait checks for that, and ``queue.Queue`` pays a lock on every take; this keeps
the take of what is already there lock-free.
"""

from __future__ import annotations

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
        self._posted = threading.Condition(threading.Lock())

    def put(self, item: T) -> None:
        with self._posted:
            self._items.append(item)
            self._posted.notify()

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
        with self._posted:
            while True:
                try:
                    return self._items.popleft()
                except IndexError:
                    pass
                if deadline is None:
                    self._posted.wait()
                    continue
                left = deadline - monotonic()
                if left <= 0:
                    raise queue.Empty
                self._posted.wait(left)
