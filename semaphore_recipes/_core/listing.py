"""The semaphores stored in a backend's namespace (``backend.list()``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredSemaphore:
    """One semaphore of the namespace: its ``name`` and stored ``capacity``."""

    name: str
    capacity: int


def by_name(found: Iterable[tuple[str, int]]) -> tuple[StoredSemaphore, ...]:
    """``(name, capacity)`` pairs as the listing answers them: sorted by name."""
    return tuple(StoredSemaphore(name, capacity) for name, capacity in sorted(found))
