"""A waiter's watch of one lower entry: made before the entry is read, its events held
back until the read is in.

etcd serves a watch whose start revision is already past from a loop that runs every
100 ms (its "unsynced" watchers); one made from "now" gets each event as the write is
applied. An arm read its entries, then watched them from the read's revision + 1: under
contention other writes came first, so nearly every such watch waited for that loop, and
grants passed in batches at those ticks however many permits were free (docs/design.md
section 7). So the watch is made from now, the arm waits for the server to confirm it
(revision C), then reads the entry (revision R >= C): what changed up to R is in the
read, what changes after R comes as events; events up to R are dropped here as the
read's. A watch confirmed only after the read (the arm's wait ran out, or the stream was
opened again before the confirmation) may have missed what happened between R and C:
the waiter is told to read the entry again, as for a watch that fired.

Thread-safety: events come on the stream's reader (a thread, or the event loop),
:meth:`open` from the waiter; one lock orders them, so an event is handed over once,
after the read's answer and in revision order. No I/O here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._core.codec import decode_entry
from .._core.protocol import EntryChanged, EntryMarked
from ..backend import Waiter
from ..errors import CorruptState
from ._proto import etcd_api_pb2 as pb

__all__ = ["EntryWatch"]


class EntryWatch:
    """The events of one watched entry for one waiter (``generation``): a held mark is
    handed over and the watch stays; a delete, or any other write, fires it (the waiter
    is told, and ``fired(key)`` called once); events wait until :meth:`open`."""

    def __init__(
        self, waiter: Waiter, generation: int, key: str, fired: Callable[[str], None]
    ) -> None:
        self.waiter = waiter
        self.generation = generation
        self.key = key
        self._fired_callback = fired
        self._lock = threading.Lock()
        self._held_back: list[Any] | None = []  # None once open
        self._read_at = 0  # the read's revision: events up to it are in it
        self._token = 0  # the entry's create_revision, as read
        self._fired = False

    def on_events(self, events: list[Any], revision: int) -> None:
        with self._lock:
            if self._held_back is not None:
                self._held_back.extend(events)
                return
            self._hand_over(events)

    def on_error(self, exc: Exception) -> None:
        """E.g. permission lost: as a fired watch, the waiter reads again."""
        with self._lock:
            self._fire(EntryChanged(self.key))

    def open(self, token: int, read_at: int, created_at: int | None) -> None:
        """The read found the entry (created at ``token``) at revision ``read_at``; the
        watch was confirmed at ``created_at`` (None: not yet)."""
        with self._lock:
            self._token, self._read_at = token, read_at
            held_back, self._held_back = self._held_back or [], None
            if created_at is not None and created_at > read_at:
                self._fire(EntryChanged(self.key))  # changes between the two: unseen
                return
            self._hand_over(held_back)

    def confirmed_late(self, created_at: int) -> None:
        """The watch was confirmed after :meth:`open` (at ``created_at``)."""
        with self._lock:
            if created_at > self._read_at:
                self._fire(EntryChanged(self.key))

    # ---- under the lock -------------------------------------------------------------
    def _hand_over(self, events: list[Any]) -> None:
        for event in events:
            if self._fired:
                return  # later events: the key reused by a newer entry
            if event.kv.mod_revision <= self._read_at:
                continue  # in the read already
            if event.type != pb.Event.DELETE:
                try:
                    data = decode_entry(self.key, event.kv.value)
                except CorruptState:
                    data = None
                if data is not None and data.held:
                    self.waiter.post(self.generation, EntryMarked(self.key, data.lower))
                    continue
                self._fire(EntryChanged(self.key))  # read it again
            else:
                self._fired = True
                self.waiter.entry_deleted(self.generation, self.key, self._token)
                self._fired_callback(self.key)

    def _fire(self, event: EntryChanged) -> None:
        if not self._fired:
            self._fired = True
            self.waiter.post(self.generation, event)
            self._fired_callback(self.key)
