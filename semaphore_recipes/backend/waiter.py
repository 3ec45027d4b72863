"""One ``acquire`` in flight, as its queue driver and the session hub see it.

On connection loss the waiter keeps waiting; when its session ended the hub posts
SessionLost (``Backend.requeue_waiters``) and the protocol enters the queue again; when
the backend can never reach the store again it posts BackendFailed (``Backend.fail``).
"""

from __future__ import annotations

import queue
from collections.abc import Callable

from .._core.protocol import (
    BackendFailed,
    Event,
    SessionLost,
)
from ..errors import BackendUnavailable


class Waiter:
    """One ``acquire`` in flight: the entry it is creating or owns, and its inbox.

    A driver's ``enqueue`` calls :meth:`new_generation` once, :meth:`creating` before
    each create it sends (so an interrupted acquire can find its entry by id), and
    :meth:`created` once the store confirmed the entry. Events for the acquire go through
    :meth:`post` with the generation they were armed for: a post for an older generation
    (a watch set for an entry that died with its session) is dropped.
    """

    def __init__(self, weight: int, owner: str) -> None:
        self.weight = weight
        self.owner = owner
        self.generation = 0
        self.entry_id: str | None = None  #: the id of the entry being created (unique)
        self.key: str | None = None  #: the entry's key once the store confirmed it
        self.token: int | None = None  #: the entry's fencing token (store revision)
        self._inbox: queue.SimpleQueue[tuple[int, Event]] = queue.SimpleQueue()

    def new_generation(self) -> int:
        self.generation += 1
        self.entry_id = self.key = None
        self.token = None
        return self.generation

    def creating(self, entry_id: str | None) -> None:
        """The id of the entry about to be created (None: that attempt is over)."""
        self.entry_id = entry_id

    def created(self, key: str, token: int) -> None:
        """The store confirmed our entry ``key`` with fencing token ``token``."""
        self.key, self.token = key, token

    def post(self, generation: int, event: Event) -> None:
        """Thread-safe; called from the client library's threads."""
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
