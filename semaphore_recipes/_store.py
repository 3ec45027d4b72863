"""What a backend provides to the Semaphore/Permit faces: one queue per semaphore.

A backend moves bytes and delivers events; the algorithm lives in ``_core``. Waiter
and permit bookkeeping (which events go to which acquire) lives here so every backend
shares it.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ._core.deadline import Deadline
from ._core.protocol import Enqueued, Event, SessionLost
from ._core.queue import Entry, EntryState
from ._core.status import Status


class Waiter:
    """One ``acquire`` in flight: the entry it is creating or owns, and its inbox.

    ``generation`` grows with every new entry of this acquire; an event posted for an
    older generation (a watch set for an entry that died with its session) is dropped.
    """

    def __init__(self, weight: int, owner: str) -> None:
        self.weight = weight
        self.owner = owner
        self.generation = 0
        self.entry_id: str | None = None  # set before the create is sent
        self.key: str | None = None  # set once the store confirmed the entry
        self.token: int | None = None
        self._inbox: queue.SimpleQueue[tuple[int, Event]] = queue.SimpleQueue()

    def new_generation(self) -> int:
        self.generation += 1
        self.entry_id = self.key = None
        self.token = None
        return self.generation

    def post(self, generation: int, event: Event) -> None:
        """Thread-safe; called from the client library's threads."""
        self._inbox.put((generation, event))

    def post_session_lost(self) -> None:
        self.post(self.generation, SessionLost())

    def next_event(self, timeout: float | None) -> Event | None:
        """The next event of the current generation, or None when ``timeout`` passes."""
        try:
            while True:
                generation, event = self._inbox.get(timeout=timeout)
                if generation == self.generation:
                    return event
        except queue.Empty:
            return None


class QueueStore(Protocol):
    """One semaphore's queue in one backend (sync)."""

    name: str
    capacity: int

    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Enqueued: ...

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost: ...

    def mark_held(
        self,
        waiter: Waiter,
        me: Entry,
        now: bool,
        lower: tuple[str, ...] | None,
        on_lost: Callable[[str], None],
    ) -> None: ...

    def abandon(self, waiter: Waiter) -> None:
        """Remove the waiter's entry if it exists (exact key, or found by entry id after a
        lost create reply); never raises; retried in the background if unreachable."""

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        """Call ``on_lost`` when the holder's entry is deleted (a one-shot watch)."""

    def remove(self, key: str) -> None:
        """Delete the holder's own entry now; never raises (background retry)."""

    def status(self) -> Status: ...

    def set_capacity(self, capacity: int) -> None: ...

    def transaction(self, key: str) -> Any: ...

    def register(self, waiter: Waiter) -> None: ...

    def unregister(self, waiter: Waiter) -> None: ...


class SessionWatch(Protocol):
    """The backend's session, as the permits see it."""

    def add_permit_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener("suspended" | "restored" | "lost")`` on session changes;
        returns the function that removes the listener."""
