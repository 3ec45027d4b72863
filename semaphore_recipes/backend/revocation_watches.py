"""Telling the holders in this process of revoke requests on their entries, for a store
that sends each request to the entry's client as a message (Redis, SQL).

A holder watches from the moment its acquire hands it the permit
(``QueueDriver.watch_revocation``), but the store may send the request before that: a
request for an entry of ours that nobody watches yet is kept, and told at the watch.
Kept requests and watches go with the entry (:meth:`RevocationWatches.forget`, before
its removal). A request lost with a connection is the store's to send again (its
heartbeat's look at the holder, ``check_holders``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["RevocationWatches"]


class RevocationWatches:
    """Our held entries' holders waiting to be told of a revoke request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[str, Callable[[], None]] = {}
        self._early: set[str] = set()  # requests that came before their holder watched

    def watch(self, key: str, on_revoke: Callable[[], None]) -> None:
        """Call ``on_revoke`` once a request is on our entry ``key``: now, if one came
        before (this thread, outside the lock), else from :meth:`requested`."""
        with self._lock:
            early = key in self._early
            if not early:
                self._watches[key] = on_revoke
        if early:
            on_revoke()

    def requested(self, key: str, ours: Callable[[], bool]) -> None:
        """A request is on the entry ``key``: its holder is told, or, with nobody
        watching yet, the request is kept if ``ours()`` says the entry is one of ours
        still (asked under the lock, so that an entry forgotten meanwhile, after its
        queue stopped calling it ours, keeps nothing)."""
        with self._lock:
            on_revoke = self._watches.pop(key, None)
            if on_revoke is None and ours():
                self._early.add(key)
        if on_revoke is not None:
            on_revoke()

    def forget(self, key: str) -> None:
        """Our entry ``key`` is about to be removed: call it after the queue stopped
        calling it ours."""
        with self._lock:
            self._watches.pop(key, None)
            self._early.discard(key)
