"""The entry slots of one backend: which ``<lease>-<slot>`` keys may serve a new entry.

A backend reuses the keys of its deleted entries (etcd's range walks every key deleted
since the last compaction: fresh keys per acquire made every listing slower). A new
entry takes the lowest slot of the current lease whose last entry is known deleted.
Taking and freeing are O(log n) in the live entries: a burst of n acquires in one
event loop must not cost n² (a scan for the lowest free slot did).
"""

from __future__ import annotations

import heapq


class EntrySlots:
    """The slots of one lease in use; not thread-safe (the backend holds its lock)."""

    def __init__(self) -> None:
        self._lease = 0  # whose slots are counted: the entries of an older one are gone
        self._taken: set[int] = set()
        self._free: list[int] = []  # heap: slots below _next whose entries are deleted
        self._next = 0  # no slot from here up was ever taken on this lease

    def take(self, lease_id: int) -> int:
        """A slot for a new entry on ``lease_id``, unique among its live entries."""
        if lease_id != self._lease:
            self._lease, self._next = lease_id, 0
            self._taken.clear()
            self._free.clear()
        if self._free:
            slot = heapq.heappop(self._free)
        else:
            slot, self._next = self._next, self._next + 1
        self._taken.add(slot)
        return slot

    def free(self, lease_id: int, slot: int) -> None:
        """The entry in ``slot`` of ``lease_id`` is deleted (or was never created)."""
        if lease_id == self._lease and slot in self._taken:
            self._taken.remove(slot)
            heapq.heappush(self._free, slot)
