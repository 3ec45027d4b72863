"""One ``acquire`` in flight, as its queue driver and the session hub see it.

On connection loss the waiter keeps waiting; when its session ended the hub posts
SessionLost (``Backend.requeue_waiters``) and the protocol enters the queue again; when
the backend can never reach the store again it posts BackendFailed (``Backend.fail``).
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Protocol

from .._core.protocol import (
    BackendFailed,
    CapacityChanged,
    EntryChanged,
    EntryDeleted,
    EntryHeld,
    EntryMarked,
    Event,
    SessionLost,
    StoreAdmitted,
)
from .._core.queue import Entry
from .._inbox import Inbox
from ..errors import BackendUnavailable

#: What a driver posts to a waiter itself; a deletion goes through
#: :meth:`Waiter.entry_deleted`, which adds what the driver kept of it.
Posted = (
    CapacityChanged
    | EntryChanged
    | EntryHeld
    | EntryMarked
    | StoreAdmitted
    | SessionLost
    | BackendFailed
)


class ViewKeeper(Protocol):
    """What a waiter needs of its queue driver (``QueueDriver`` is one)."""

    def admitted_view(self, key: str, token: int | None = None) -> tuple[Entry, ...] | None: ...

    def key_reused(self, key: str) -> None: ...


class Waiter:
    """One ``acquire`` in flight: the entry it is creating or owns, and its inbox.

    A driver's ``enqueue`` calls :meth:`new_generation` once per attempt,
    :meth:`creating` before each create it sends (so an interrupted acquire can find its
    entry by id), and :meth:`created` once the store confirmed the entry: the queue
    driver's base checks that it did (``QueueDriver.step``). Events for the acquire go
    through :meth:`post` (a deletion: :meth:`entry_deleted`) with the generation they
    were armed for: a post for an older generation (a watch set for an entry that died
    with its session) is dropped.
    """

    def __init__(self, weight: int, owner: str) -> None:
        self.weight = weight
        self.owner = owner
        self.generation = 0
        self.entry_id: str | None = None  #: the id of the entry being created (unique)
        self.key: str | None = None  #: the entry's key once the store confirmed it
        self.token: int | None = None  #: the entry's fencing token (store revision)
        #: the acquire asked for job slots (``slot=True``): a store that decides them at
        #: admission (``Capabilities.admission_slots``) gives them in the admitting write
        self.wants_slots = False
        self._inbox: Inbox[tuple[int, Event]] = Inbox()
        self._views: ViewKeeper | None = None  # the driver it is registered with

    def bind(self, views: ViewKeeper) -> None:
        """Registered with the driver ``views`` (``QueueDriver.register``)."""
        self._views = views

    def new_generation(self) -> int:
        self.generation += 1
        self.entry_id = self.key = None
        self.token = None
        return self.generation

    def creating(self, entry_id: str | None) -> None:
        """The id of the entry about to be created (None: that attempt is over). Where
        the id is the entry's key and keys are reused, the view the driver kept for the
        key's previous entry is dropped first (``QueueDriver.key_reused``)."""
        if entry_id is not None and self._views is not None:
            self._views.key_reused(entry_id)
        self.entry_id = entry_id

    def created(self, key: str, token: int) -> None:
        """The store confirmed our entry ``key`` with fencing token ``token``."""
        self.key, self.token = key, token

    def post(self, generation: int, event: Posted) -> None:
        """Thread-safe; called from the client library's threads. A deletion is not
        posted here (TypeError): :meth:`entry_deleted` adds the view the driver kept."""
        if isinstance(event, EntryDeleted):
            raise TypeError("a deletion goes through Waiter.entry_deleted()")
        self.deliver(generation, event)

    def entry_deleted(self, generation: int, key: str, token: int | None = None) -> None:
        """The watched entry ``key`` (created with ``token``, where keys are reused) was
        deleted: EntryDeleted, with the view it was admitted with when it was admitted
        through this waiter's driver (``QueueDriver.admitted_view``)."""
        view = None if self._views is None else self._views.admitted_view(key, token)
        self.deliver(generation, EntryDeleted(key, view))

    def deliver(self, generation: int, event: Event) -> None:
        """Put ``event`` in the inbox (a multi-acquire's waiter puts it in the shared one)."""
        self._inbox.put((generation, event))

    def post_session_lost(self, affected: Callable[[str | None], bool] | None = None) -> None:
        """Post SessionLost, if ``affected`` (given the entry id) says so. The generation
        is read before the entry id: a waiter that meanwhile started another attempt
        (a new generation) drops a post that was meant for the attempt it left."""
        generation = self.generation
        if affected is None or affected(self.entry_id):
            self.post(generation, SessionLost())

    def post_backend_failed(self, reason: str) -> None:
        self.post(self.generation, BackendFailed(reason))

    def session_ended(self) -> bool:
        """Drain the inbox (an admitted waiter is done with it): did the session end
        after the last event the protocol saw? BackendUnavailable when the backend
        failed or was closed meanwhile (the acquire ends with it, as a waiting one does)."""
        ended = False
        while True:
            try:
                generation, event = self._inbox.get_nowait()
            except queue.Empty:
                return ended
            if generation != self.generation:
                continue
            if isinstance(event, BackendFailed):
                raise BackendUnavailable(event.reason)
            ended |= isinstance(event, SessionLost)

    def next_event(self, timeout: float | None) -> Event | None:
        """The next event of the current generation, or None when ``timeout`` passes."""
        try:
            while True:
                generation, event = self._inbox.get(timeout=timeout)
                if generation == self.generation:
                    return event
        except queue.Empty:
            return None
