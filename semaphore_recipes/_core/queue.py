"""Admission and who-watches-whom: the decision a waiter makes from its view.

A client's *view* is the set of entries ordered before its own that it listed after
creating its entry, minus those it has since seen deleted. Entries created later sort
higher and lower entries only ever disappear, so the true lower set is always a subset
of the view: a decision from the view can under-admit, never over-admit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Entry:
    """One queue entry as a waiter knows it.

    ``order`` is the store's ordering (ZooKeeper sequence, etcd create_revision);
    ``held`` is True once the entry's held mark has been seen (it never goes back).
    """

    key: str
    order: int
    weight: int
    held: bool = False


@dataclass(frozen=True)
class Admitted:
    """The prefix sum of weights up to and including this entry fits the capacity."""


@dataclass(frozen=True)
class Wait:
    """Not admitted yet. ``watch``: the entries whose change can let this waiter move.

    ``head`` waiters (predecessor admitted or admissible) watch every lower entry, since
    holders release in any order; the others watch their predecessor only, which wakes
    them when it leaves or marks itself held.
    """

    watch: tuple[str, ...]
    head: bool


ADMITTED = Admitted()

#: A held mark lists at most this many lower keys (its holder's view when admitted).
MAX_MARK_KEYS = 64


@dataclass(frozen=True)
class EntryState:
    """What reading an entry tells: its held mark and, with the mark, the lower entries
    its holder still counted when it was admitted (None when not recorded).

    ``left_view``: not None when the entry is gone, but was admitted through the
    waiter's own driver (the same process), which kept the view it was admitted with:
    these entries (see :meth:`QueuePosition.left`)."""

    held: bool
    lower: tuple[str, ...] | None = None
    left_view: tuple[Entry, ...] | None = None


def nearest_needed(capacity: int) -> int:
    """How many of its nearest lower entries a waiter keeps, and a store may list alone
    at enqueue (``Enqueued.lower_complete``): capacity + 1 (their weights, at least 1
    each, pass the capacity), and at least as many as a held mark records."""
    return max(capacity + 1, MAX_MARK_KEYS)


def decide(lower: Sequence[Entry], weight: int, capacity: int) -> Admitted | Wait:
    """Admission by prefix sum, and the entries to watch when not admitted.

    ``lower`` must be in queue order. Pure and total: any capacity, any view.
    """
    total = sum(e.weight for e in lower)
    if total + weight <= capacity:
        return ADMITTED
    if not lower:
        # Only after a capacity decrease below our weight: a capacity change wakes us.
        return Wait(watch=(), head=True)
    predecessor = lower[-1]
    if predecessor.held or total <= capacity:
        return Wait(watch=tuple(e.key for e in lower), head=True)
    return Wait(watch=(predecessor.key,), head=False)


class QueuePosition:
    """A waiter's view of the queue and the watches it believes are armed.

    Drivers feed it what the store answered (:meth:`armed`, :meth:`deleted`,
    :meth:`marked_held`, :meth:`set_capacity`) and ask :meth:`decision` and
    :meth:`keys_to_arm`. A fired watch is no longer armed (ZooKeeper's are one-shot);
    a store whose watch outlives a held mark says so with :meth:`armed`.
    """

    def __init__(
        self,
        me: Entry,
        lower: Iterable[Entry],
        capacity: int,
        *,
        capacity_version: int = 0,
        complete: bool = True,
    ) -> None:
        self.me = me
        self.capacity = capacity
        self.capacity_version = capacity_version
        ordered = sorted(lower, key=lambda e: e.order)
        if ordered and ordered[-1].order >= me.order:
            raise ValueError(f"entry {ordered[-1].key!r} is not lower than {me.key!r}")
        self._lower: dict[str, Entry] = {}
        #: The view keeps only the nearest entries (see _keep_nearest): never admit from it.
        self.truncated = False
        self._keep_nearest(ordered)
        self.truncated |= not complete  # the store listed only the nearest entries
        self._armed: set[str] = set()
        #: Our predecessor vanished before we saw it held: the rest of the view may be
        #: long gone too. One fresh listing beats probing it entry by entry.
        self._stale = False

    def _keep_nearest(self, ordered: list[Entry]) -> None:
        """Keep the nearest :func:`nearest_needed` lower entries: their weights pass the
        capacity, so they alone show we cannot be admitted, and a waiter far back in a
        long queue holds (and sums, at every event) that many entries, not the whole
        queue. The view is then no longer a superset of the lower entries: a decision
        that could admit us, or make us the head (who watches every lower entry), needs
        a fresh listing first (:attr:`stale`), unless a predecessor's held mark makes it
        whole (:meth:`armed`): keeping as many entries as a mark records makes that the
        usual case, and a fresh listing (on ZooKeeper, of the whole queue) the rare one."""
        keep = nearest_needed(self.capacity)
        kept: list[Entry] = []
        total = 0
        self.truncated = False
        for e in reversed(ordered):
            if total > self.capacity and len(kept) >= keep:
                self.truncated = True
                break
            kept.append(e)
            total += e.weight
        self._lower = {e.key: e for e in reversed(kept)}
        #: What a truncation left out is older than this (the oldest entry kept).
        self._kept_from = kept[-1].order if kept else self.me.order
        #: Every key our view has held since this listing: what a truncation left out
        #: is none of them (see :meth:`armed`).
        self._seen = set(self._lower)

    @property
    def stale(self) -> bool:
        """Is a fresh listing of the lower entries needed before deciding?"""
        if self._stale:
            return True
        if not self.truncated:
            return False
        decision = self.decision()
        if isinstance(decision, Admitted):
            return True
        # A head reads its predecessor first (keys_to_arm), whose held mark may make the
        # view whole: list afresh only once that read is done and did not.
        return decision.head and bool(decision.watch) and decision.watch[-1] in self._armed

    @property
    def lower(self) -> tuple[Entry, ...]:
        return tuple(self._lower.values())

    def decision(self) -> Admitted | Wait:
        return decide(tuple(self._lower.values()), self.me.weight, self.capacity)

    def keys_to_arm(self, decision: Wait) -> tuple[str, ...]:
        if decision.head and decision.watch and decision.watch[-1] not in self._armed:
            # Read the predecessor alone first: its held mark may say which of the
            # older entries are gone, so we need not probe them one by one.
            return decision.watch[-1:]
        return tuple(k for k in decision.watch if k not in self._armed)

    def armed(self, key: str, state: EntryState | None) -> None:
        """Result of reading ``key`` with a watch: None when it is already gone."""
        self.read(key, state, watched=True)

    def read(self, key: str, state: EntryState | None, *, watched: bool) -> None:
        """Result of reading ``key``, with a watch set (an Arm) or not (a Peek: the
        entry stays unwatched, so a head still arms it if it is in its way)."""
        entry = self._lower.get(key)
        if entry is None:
            return
        if state is None:
            self.deleted(key)
            return
        if state.left_view is not None:
            self.left(key, state.left_view)
            return
        if watched:
            self._armed.add(key)
        if state.held:
            self._lower[key] = replace(entry, held=True)
            if state.lower is not None:
                # The holder's view when admitted was a superset of its true lower set,
                # and entries only disappear: whatever below it is missing from that
                # view is gone. This keeps a new head from probing every entry it
                # listed long ago (work per release stays flat in the queue length).
                keep = set(state.lower)
                for other in [e for e in self._lower.values() if e.order < entry.order]:
                    if other.key not in keep:
                        self.deleted(other.key)
                # What a truncated view left out is older than this entry, so it is in
                # that recorded view or gone: if the recorded view names only entries
                # our view has held (some may be gone since), the rest is gone.
                if self.truncated and keep.issubset(self._seen):
                    self.truncated = False

    def left(self, key: str, view: tuple[Entry, ...]) -> None:
        """``key`` was admitted with ``view`` (the entries its driver kept: the same
        process) and is gone: the held mark we did not read in time, and more. Entries
        only disappear, so those of ours older than it and not in ``view`` are gone; and
        what a truncated view of ours left out is older than every entry we kept, so it
        is in ``view`` or gone: taking those entries in makes our view whole again (an
        admitted view is whole: admission never comes from a truncated one)."""
        entry = self._lower.get(key)
        if entry is None:
            return
        self.armed(key, EntryState(held=True, lower=tuple(e.key for e in view)))
        if self.truncated:
            left_out = [e for e in view if e.order < self._kept_from and e.key not in self._lower]
            merged = sorted([*left_out, *self._lower.values()], key=lambda e: e.order)
            self._lower, self.truncated = {e.key: e for e in merged}, False
            self._seen.update(self._lower)
        self.deleted(key)

    def keys_to_probe(self) -> tuple[str, ...]:
        """A stale truncated view's nearest unwatched entries, to read (and watch) rather
        than list a long queue afresh: each is then known gone or there, a holder with
        the view its mark records, which also tells which entries below it are gone
        (:meth:`armed`), so the next round reads fewer. A mark that names only entries
        our view has held makes the view whole: the usual case in a drain, where the
        holders' views are the entries just ahead of ours. A round is capacity + 1
        entries, newest first (the holders just ahead). Empty when the view is whole
        (a short queue: one listing costs less than reading its entries) or every
        entry of it is watched."""
        if not (self._stale and self.truncated):
            return ()
        unwatched = [k for k in self._lower if k not in self._armed]
        return tuple(unwatched[-(self.capacity + 1) :])

    def probed(self) -> None:
        """A round of :meth:`keys_to_probe` was read (and :meth:`armed`). Once every
        entry of the view is watched, the view is exact about its entries again: a
        deletion would be told. What a truncation left out is another matter
        (:attr:`stale` still asks a listing when the view may admit us and no mark
        made it whole)."""
        if all(k in self._armed for k in self._lower):
            self._stale = False

    def lower_keys(self) -> tuple[str, ...] | None:
        """What our held mark records of our view (None when too long to record)."""
        return tuple(self._lower) if len(self._lower) <= MAX_MARK_KEYS else None

    def deleted(self, key: str) -> None:
        entries = list(self._lower.values())
        if len(entries) > 1 and entries[-1].key == key:
            predecessor = entries[-1]
            total = sum(e.weight for e in entries)
            head = predecessor.held or total <= self.capacity
            # A head watches every lower entry, so its view stays right; a waiter that
            # watched only its predecessor learns nothing of the entries below it.
            # Nor does one whose predecessor was admitted but left before its mark (and
            # the view in it) was read: the rest of our view weighs more than that
            # admission allowed, so some of it is long gone, and probing it one entry
            # per round trip is what a zero-hold-time queue would do at every grant.
            if not head or (predecessor.held and total > self.capacity):
                self._stale = True
        self._lower.pop(key, None)
        self._armed.discard(key)

    def relisted(self, lower: Iterable[Entry]) -> None:
        """A fresh listing of the lower entries replaces the view (held marks we already
        saw are kept: they never go back)."""
        fresh: list[Entry] = []
        for e in sorted(lower, key=lambda e: e.order):
            if e.order < self.me.order:
                old = self._lower.get(e.key)
                fresh.append(replace(e, held=True) if old is not None and old.held else e)
        self._stale = False
        self._keep_nearest(fresh)
        if self.stale:  # this listing is whole: decide from all of it, not list again
            self._lower, self.truncated = {e.key: e for e in fresh}, False
            self._seen = set(self._lower)
        self._armed &= set(self._lower)

    def marked_held(self, key: str) -> None:
        """The watch on ``key`` fired because the entry wrote its held mark."""
        self._armed.discard(key)
        if key in self._lower:
            self._lower[key] = replace(self._lower[key], held=True)

    def watch_fired(self, key: str) -> None:
        """A watch fired for a reason the event did not tell: read it again."""
        self._armed.discard(key)

    def set_capacity(self, capacity: int, version: int) -> None:
        """The capacity stored at ``version``; an older one than we know is ignored (a
        capacity applied by the driver can reach us after a newer one)."""
        if version > self.capacity_version:
            self.capacity, self.capacity_version = capacity, version
