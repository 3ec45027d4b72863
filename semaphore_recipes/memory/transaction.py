"""Fenced transactions on a memory store's key space."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING

from ..backend import FencedTransaction

if TYPE_CHECKING:
    from .queue import MemoryQueue


class MemoryFencedTransaction(FencedTransaction):
    """Writes applied all or none, only while the permit's entry still has its token.

    The entry goes when the permit is released or its session ends (expired or closed),
    and a key is never reused by a later entry: the fence fails from then on.
    """

    def __init__(
        self,
        queue: MemoryQueue,
        entry_key: str,
        token: int,
        others: Sequence[tuple[MemoryQueue, str]] = (),
    ) -> None:
        """``others``: more entries of the same token that fence it (a multi-permit's)."""
        super().__init__(queue.backend)
        self._queue = queue
        self.entry_key = entry_key
        self.token = token
        self._fences = [(queue.path, entry_key), *((q.path, key) for q, key in others)]

    def apply(self) -> Generator[object, object, None]:
        """PermitLost when the fence fails, WriteConflict when a write's condition
        fails (nothing is written then), BackendUnavailable when the backend is closed
        or stays disconnected past the request timeout (nothing is written then either:
        a memory store never leaves a commit in doubt)."""
        queue = self._queue
        yield from queue.call(
            lambda: queue.store.commit_fenced(self._fences, self.token, self.writes)
        )
