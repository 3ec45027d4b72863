"""One queue's listings, shared by the enqueues of a session and parsed once.

An enqueue creates its entry and lists the queue. ZooKeeper answers one session's
requests in order, so a listing sent after a create sees that create: every enqueue
whose create went out before a listing still in flight can take that listing's answer
instead of sending its own. A burst of W acquires from one process (the asyncio face's
thousands of tasks, or threads) then costs one listing, not W listings of up to W
children each, and the children are parsed and sorted once, not once per waiter.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from typing import Any

from .._core.names import parse_zk_entry
from .._core.queue import Entry

__all__ = ["Listing", "Listings", "nearest_lower", "sorted_entries"]


class Listing:
    """A ``get_children`` of the queue in flight (``reply``), sent after the creates
    numbered up to ``after``."""

    __slots__ = ("_lock", "_sorted", "after", "reply")

    def __init__(self, after: int, reply: Any) -> None:
        self.after = after
        self.reply = reply
        self._lock = threading.Lock()
        self._sorted: list[tuple[int, int, str]] | None = None  # (sequence, weight, name)

    def entries(self, children: list[str]) -> list[tuple[int, int, str]]:
        """The answer's entries in queue order, parsed by the first to ask."""
        with self._lock:
            if self._sorted is None:
                self._sorted = sorted_entries(children)
            return self._sorted


def sorted_entries(children: list[str]) -> list[tuple[int, int, str]]:
    """The queue entries among ``children``, as (sequence, weight, name), in queue order."""
    parsed = []
    for child in children:
        p = parse_zk_entry(child)
        if p is not None:
            parsed.append((p[2], p[1], child))
    parsed.sort()
    return parsed


def nearest_lower(
    entries: list[tuple[int, int, str]], my_seq: int, nearest: int
) -> tuple[tuple[Entry, ...], bool, bool]:
    """From the sorted ``entries``: the ``nearest`` entries below sequence ``my_seq``,
    whether those are all of them, and whether an entry above it exists."""
    below = bisect.bisect_left(entries, (my_seq,))
    above = bisect.bisect_right(entries, (my_seq, float("inf")))
    start = max(0, below - nearest)
    lower = tuple(Entry(key=name, order=seq, weight=w) for seq, w, name in entries[start:below])
    return lower, start == 0, above < len(entries)


class Listings:
    """Numbers the queue's creates and hands out listings sent after them (see module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._creates = 0
        self._current: Listing | None = None

    def create(self, send: Callable[[], Any]) -> tuple[int, Any]:
        """Send a create (``send()``) and number it, as one step: the numbers follow the
        order in which the creates were handed to the client."""
        with self._lock:
            self._creates += 1
            return self._creates, send()

    def after(self, create: int, send: Callable[[], Any]) -> Listing:
        """A listing sent after the create numbered ``create``: the one in flight if it
        was, else a new one (``send()``)."""
        with self._lock:
            current = self._current
            if current is not None and current.after >= create and not current.reply.ready():
                return current
            current = self._current = Listing(self._creates, send())
            return current
