"""Job slots: a permit that knows which of ``0..capacity-1`` it holds (issue 16).

``acquire(permits=k, slot=True)`` takes, after admission, ``k`` distinct indices, each a
*slot record* in the store created if absent, bound to the session like the entry and
deleted in the same request as the entry. Which indices to try, and what to do when
another holder wins one, is decided here (:func:`take_slots`); a backend only lists
the records and creates one (docs/design.md section 2, "Job slots"). A store whose
write decides admission may instead give the slots in that write, by the same rule
(lowest free first), and the admission carries them (Redis's scripts:
``Capabilities.admission_slots``): then no step of this module runs.

Why an admitted request always finds its ``k`` free indices: the live entries holding
slots are all admitted, so together with ours they weigh at most the capacity they were
admitted under, and every record dies with its entry in one request. The indices held
by others are then at most that capacity minus ``k``.
"""

from __future__ import annotations

from collections.abc import Collection, Generator
from dataclasses import dataclass

from .queue import Entry

__all__ = ["ListSlots", "Slot", "TakeSlot", "lowest_free", "take_slots"]


@dataclass(frozen=True)
class Slot:
    """One slot a permit holds: ``index`` in ``0..capacity-1`` (distinct from every
    other holder's), and ``token``, the creation version of its record in the store
    (ZooKeeper czxid, etcd create_revision, the memory store's revision, a value of
    Redis's store counter): it grows
    across the whole store, so a system that keys its writes by slot can fence them
    per slot, as ``permit.token`` fences them per permit."""

    index: int
    token: int


@dataclass(frozen=True)
class ListSlots:
    """Step: list the semaphore's slot records. Answer: the indices that have one (a
    frozenset), or SessionLost."""


@dataclass(frozen=True)
class TakeSlot:
    """Step: create the record of slot ``index`` for our entry ``me``, if no record of
    that index exists, bound to the session, and only while our entry exists (a retry
    after a lost reply adopts a record that names our entry). Answer: the record's token
    (int); when another entry holds the index, a fresh listing (as ListSlots answers:
    a frozenset);
    or SessionLost when our entry is gone (the session ended, or it was deleted): the
    acquire enters the queue again."""

    me: Entry
    index: int


SlotStep = ListSlots | TakeSlot


def lowest_free(taken: Collection[int], count: int, start: int = 0) -> list[int]:
    """The ``count`` lowest indices from ``start`` not in ``taken``."""
    free: list[int] = []
    index = start
    while len(free) < count:
        if index not in taken:
            free.append(index)
        index += 1
    return free


def take_slots(me: Entry, count: int) -> Generator[SlotStep, object, tuple[Slot, ...] | None]:
    """Take ``count`` distinct slots for the admitted entry ``me``, lowest free first.
    A lost race for an index comes with a fresh listing, and the lowest free index of
    that one is tried next: a listing is what proves enough indices free below the
    capacity (records freed since an older listing would be skipped, and the indices
    taken pushed past it). Returns the slots, or None when the answer was SessionLost
    (our entry, and any record made for it, is gone)."""
    listing = yield ListSlots()
    got: list[Slot] = []
    while isinstance(listing, frozenset):
        # every index with a record is taken (ours included: they are in ``got``)
        taken = listing | {slot.index for slot in got}
        for index in lowest_free(taken, count - len(got)):
            answer = yield TakeSlot(me, index)
            if isinstance(answer, frozenset):
                listing = answer  # another holder won it: here is who holds what now
                break
            if not isinstance(answer, int) or isinstance(answer, bool):
                return None
            got.append(Slot(index, answer))
        else:
            return tuple(got)
    return None
