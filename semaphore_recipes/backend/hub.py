"""The session hub: who hears of a backend's session changes.

Waiters register for the length of their acquire; permits listen while held. A backend
reports its session through the hub: :meth:`SessionHub.publish` (SUSPENDED, RESTORED,
LOST) to the permits, :meth:`SessionHub.requeue_waiters` when entries died with a
session (the waiters enter the queue again), :meth:`SessionHub.fail` when the store can
never be reached again (permits LOST, waiters end with BackendUnavailable).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from .session import SessionEvent, session_lost
from .waiter import Waiter


class SessionHub:
    """The waiters and permit listeners of one backend (thread-safe)."""

    def __init__(self) -> None:
        self._hub_lock = threading.Lock()
        self._waiters: set[Waiter] = set()
        self._permit_listeners: dict[int, Callable[[SessionEvent], None]] = {}
        self._listener_ids = itertools.count()

    # -- bookkeeping the faces use --
    def register_waiter(self, waiter: Waiter) -> None:
        """``waiter`` is told of session changes until unregistered (the driver does it)."""
        with self._hub_lock:
            self._waiters.add(waiter)

    def unregister_waiter(self, waiter: Waiter) -> None:
        """The acquire of ``waiter`` is over."""
        with self._hub_lock:
            self._waiters.discard(waiter)

    def add_permit_listener(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every session change; returns what removes it."""
        with self._hub_lock:
            key = next(self._listener_ids)
            self._permit_listeners[key] = listener

        def remove() -> None:
            with self._hub_lock:
                self._permit_listeners.pop(key, None)

        return remove

    # -- what a backend reports --
    def publish(self, event: SessionEvent) -> None:
        """Tell every held permit of a session change."""
        with self._hub_lock:
            listeners = list(self._permit_listeners.values())
        for listener in listeners:
            listener(event)

    def requeue_waiters(self, affected: Callable[[str | None], bool] | None = None) -> None:
        """Tell the waiters to enter the queue again (their entries died with a session):
        all of them, or those whose entry id ``affected`` names."""
        with self._hub_lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.post_session_lost(affected)

    def fail(self, reason: str) -> None:
        """The store can never be reached again: permits are LOST, waiters end with
        BackendUnavailable, both with ``reason``."""
        self.publish(session_lost(reason))
        with self._hub_lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.post_backend_failed(reason)
