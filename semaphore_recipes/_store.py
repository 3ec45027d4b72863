"""What a backend provides to the Semaphore/Permit faces: one queue per semaphore.

A backend moves bytes and delivers events; the algorithm lives in ``_core``. Waiter
and permit bookkeeping (which events go to which acquire) lives here so every backend
shares it.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ._core.deadline import Deadline
from ._core.protocol import CapacityChanged, Enqueued, Event, SessionLost
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

    def session_ended(self) -> bool:
        """Drain the inbox (an admitted waiter is done with it): did the session end
        after the last event the protocol saw?"""
        ended = False
        while True:
            try:
                generation, event = self._inbox.get_nowait()
            except queue.Empty:
                return ended
            ended |= generation == self.generation and isinstance(event, SessionLost)

    def next_event(self, timeout: float | None) -> Event | None:
        """The next event of the current generation, or None when ``timeout`` passes."""
        try:
            while True:
                generation, event = self._inbox.get(timeout=timeout)
                if generation == self.generation:
                    return event
        except queue.Empty:
            return None


log = logging.getLogger("semaphore_recipes")


class SessionHub:
    """A backend's session as waiters and permits see it: who to tell when it changes.

    Backends call :meth:`_notify_permits` with "suspended", "restored" or a reason the
    permits are lost, and :meth:`_session_lost` when waiters must enter the queue again.
    """

    def __init__(self) -> None:
        self._hub_lock = threading.Lock()
        self._waiters: set[Waiter] = set()
        self._permit_listeners: dict[int, Callable[[str], None]] = {}
        self._listener_ids = itertools.count()

    def register_waiter(self, waiter: Waiter) -> None:
        with self._hub_lock:
            self._waiters.add(waiter)

    def unregister_waiter(self, waiter: Waiter) -> None:
        with self._hub_lock:
            self._waiters.discard(waiter)

    def add_permit_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        with self._hub_lock:
            key = next(self._listener_ids)
            self._permit_listeners[key] = listener

        def remove() -> None:
            with self._hub_lock:
                self._permit_listeners.pop(key, None)

        return remove

    def _notify_permits(self, change: str) -> None:
        with self._hub_lock:
            listeners = list(self._permit_listeners.values())
        for listener in listeners:
            listener(change)

    def _session_lost(self) -> None:
        with self._hub_lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.post_session_lost()


class QueueBase:
    """What every backend's queue shares: its waiters, the cached capacity and its
    fan-out, and the holders admitted without a held mark."""

    def __init__(self, name: str, hub: SessionHub) -> None:
        self.name = name
        self._hub = hub
        self._lock = threading.Lock()
        self._waiters: set[Waiter] = set()
        self._unmarked: dict[str, Callable[[], None]] = {}  # key -> writes its mark
        self._capacity_version = -1  # store version of the capacity we last applied
        self.capacity = 0

    def register(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.add(waiter)
        self._hub.register_waiter(waiter)

    def unregister(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.discard(waiter)
        self._hub.unregister_waiter(waiter)

    def _defer_mark(self, key: str, write_mark: Callable[[], None]) -> None:
        with self._lock:
            self._unmarked[key] = write_mark

    def _forget_mark(self, key: str) -> None:
        with self._lock:
            self._unmarked.pop(key, None)

    def _new_capacity(self, capacity: int, version: int) -> None:
        """Apply a capacity read at store ``version`` (older reads are ignored)."""
        with self._lock:
            if version < self._capacity_version:
                return  # an older read finishing late
            self._capacity_version = version
            old, self.capacity = self.capacity, capacity
            waiters = list(self._waiters)
            unmarked = list(self._unmarked.values()) if capacity < old else []
            if unmarked:
                self._unmarked.clear()
        if capacity == old:
            return
        log.info("semaphore %r: capacity %d -> %d", self.name, old, capacity)
        for waiter in waiters:
            waiter.post(waiter.generation, CapacityChanged(capacity))
        # A newcomer that read the lower capacity may take an unmarked holder for not
        # admitted and watch only it: the mark is what wakes it (docs/design.md).
        for write_mark in unmarked:
            write_mark()


class QueueStore(Protocol):
    """One semaphore's queue in one backend (sync)."""

    name: str
    capacity: int

    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Enqueued: ...

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost: ...

    def relist(self, waiter: Waiter, deadline: Deadline) -> list[Entry] | SessionLost:
        """The entries lower than the waiter's own, listed afresh (no watches)."""
        ...

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
        """Call ``on_lost`` when the holder's entry is deleted, until ``remove(key)``
        (the holder's own held mark does not end the watch)."""

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
        """Call ``listener("suspended")``, ``listener("restored")``, or ``listener(why)``
        with why the permits are lost, on session changes; returns the function that
        removes the listener."""
