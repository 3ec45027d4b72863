"""The memory harness: fault verbs on a test's own in-process store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..backend import Backend
from ..client import Client
from ..memory import MemoryBackend, store_named
from .faces import store_backend
from .harness import Harness, Verb

__all__ = ["MemoryHarness"]


class MemoryHarness(Harness):
    """The memory store behind ``url`` (``memory://NAME``, a store of the test's own).

    ``expire_session`` ends a backend's session as a server expiring it would (the
    backend is told at once and goes on with a new session); ``sessions`` lists the
    store's live sessions. There is no network to cut and no member to kill: a test
    disconnects a memory backend with ``backend.disconnect()`` / ``reconnect()``.
    """

    kind = "memory"
    missing: Mapping[Verb, str] = {
        Verb.CUT: "an in-process store has no network (backend.disconnect() instead)",
        Verb.LOSE_NEXT_REPLY: "an in-process store has no network to lose a reply",
        Verb.KILL_LEADER: "one in-process store, no members to elect a leader",
    }

    def connect(self, *args: Any, **kwargs: Any) -> Client:
        """As :meth:`Harness.connect`, typed for this store."""
        backend = super().connect(*args, **kwargs)
        if not isinstance(store_backend(backend), MemoryBackend):
            raise TypeError(f"the memory harness opened {backend!r}")
        return backend

    @property
    def _store_name(self) -> str:
        return self.url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]

    def entries(self, name: str | None = None) -> list[str]:
        paths = store_named(self._store_name).entry_paths()
        return [p for p in paths if name is None or p.rpartition("/")[0].endswith(f"/{name}")]

    def delete_entry(self, entry: str) -> None:
        if not store_named(self._store_name).delete(entry):
            raise LookupError(f"no entry {entry!r} in the memory store")

    def expire_session(self, backend: Client | Backend) -> None:
        _memory(backend).expire_session()

    def sessions(self) -> set[int]:
        return store_named(self._store_name).sessions()

    def session_of(self, backend: Client | Backend) -> int:
        return _memory(backend).session


def _memory(backend: Client | Backend) -> MemoryBackend:
    store = store_backend(backend)
    if not isinstance(store, MemoryBackend):
        raise TypeError(f"not a memory backend: {backend!r}")
    return store
