"""One semaphore's queue in a store: the store's side of the protocol steps.

A backend's :class:`QueueDriver` subclass answers the steps of ``_core.protocol``
(enqueue, arm, relist, the held mark, leaving) and keeps what its successors in this
process need (admitted views, slot records in flight). On connection loss its requests
wait within their deadline; on expiry the entries it made are gone with the session
(the waiters re-enter the queue: ``waiter.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

from .._core.codec import EntryData
from .._core.deadline import Deadline
from .._core.program import Program
from .._core.protocol import (
    CapacityChanged,
    Enqueued,
    EntryDeleted,
    SessionLost,
)
from .._core.queue import Entry, EntryState
from .._core.status import Status
from ..errors import SlotsNotSupported
from .fenced import FencedTransaction
from .waiter import Waiter

if TYPE_CHECKING:
    from .store import Backend

log = logging.getLogger("semaphore_recipes")


#: How many admitted views of its own entries a driver keeps (QueueDriver.admitted_view):
#: a successor's watch tells it of a deletion soon after it lands, and a view is at
#: most MAX_MARK_KEYS keys.
ADMITTED_VIEWS_KEPT = 1024


class QueueDriver(ABC):
    """One semaphore's queue in one backend: the store's side of the protocol steps.

    What is the same for every store is here (the waiters, the cached capacity and its
    fan-out to waiters, held marks deferred until the capacity is lowered); a subclass
    implements the abstract methods. Each step's answer is the core's value
    (:class:`Enqueued`, ``{key: EntryState | None}``, a list of :class:`Entry`, or
    :class:`SessionLost`); events for waiters go through :meth:`Waiter.post`.
    """

    #: Does the held mark record the entry's weight (a store whose keys do not)?
    mark_records_weight: ClassVar[bool] = True

    def __init__(self, name: str, backend: Backend) -> None:
        self.name = name
        self.backend = backend
        self.request_timeout = backend.request_timeout
        self._lock = threading.Lock()
        self._waiters: set[Waiter] = set()
        self._unmarked: dict[str, Callable[[], None]] = {}  # key -> writes its mark
        # key -> (token, view): the views our entries were admitted with (admitted_view)
        self._admitted_views: dict[str, tuple[int, tuple[Entry, ...]]] = {}
        self._capacity_version = -1  # store version of the capacity we last applied
        self.capacity = 0
        # entry key -> {slot index: record token, None while its create is unanswered}
        self._slot_records: dict[str, dict[int, int | None]] = {}

    # -- shared bookkeeping --
    def register(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.add(waiter)
        self.backend.register_waiter(waiter)

    def unregister(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.discard(waiter)
        self.backend.unregister_waiter(waiter)

    def apply_capacity(self, capacity: int, version: int) -> None:
        """Apply a capacity read at store ``version``, a number that grows with every
        write of the capacity (older reads are ignored): waiters are woken, and holders
        without a held mark write theirs if it went down."""
        with self._lock:
            if version < self._capacity_version:
                return  # an older read finishing late
            self._capacity_version = version
            old, self.capacity = self.capacity, capacity
            waiters = list(self._waiters)
            unmarked = list(self._unmarked.values()) if capacity < old else []
            if unmarked:
                self._unmarked.clear()
        if capacity == old:
            return
        log.info("semaphore %r: capacity %d -> %d", self.name, old, capacity)
        for waiter in waiters:
            waiter.post(waiter.generation, CapacityChanged(capacity, version))
        # A newcomer that read the lower capacity may take an unmarked holder for not
        # admitted and watch only it: the mark is what wakes it (docs/design.md).
        for write_mark in unmarked:
            write_mark()

    def mark_held(
        self,
        waiter: Waiter,
        me: Entry,
        now: bool,
        lower: tuple[str, ...] | None,
        on_lost: Callable[[str], None],
        view: tuple[Entry, ...] | None = None,
    ) -> None:
        """The protocol's MarkHeld step: write the mark now, or keep it for a capacity
        decrease (see ``_core.protocol.MarkHeld``). ``view``: the entries of the view
        we were admitted with, kept for successors of this process (admitted_view);
        None keeps nothing (an empty view would tell them nothing older is left)."""
        token = waiter.token
        assert token is not None
        if view is not None:
            with self._lock:
                views = self._admitted_views
                views[me.key] = (token, view)
                if len(views) > ADMITTED_VIEWS_KEPT:
                    del views[next(iter(views))]  # the oldest admission
        mark = EntryData(
            owner=waiter.owner,
            held=True,
            since=time.time(),
            weight=me.weight if self.mark_records_weight else None,
            lower=lower,
        )
        if now:
            self.write_mark(me.key, token, mark, on_lost)
            return
        with self._lock:
            self._unmarked[me.key] = lambda: self.write_mark(me.key, token, mark, _ignore)

    def admitted_view(self, key: str, token: int | None = None) -> tuple[Entry, ...] | None:
        """The entries of the view our own entry ``key`` was admitted with (what its
        held mark records, and their order and weight), kept after it leaves; None when
        it was not ours, or is long gone. ``token``: the entry's, where keys are reused
        (None where a key names one entry only).

        A successor in the same process that was watching it learns from it what the
        mark would have told, when the entry left before the mark could be read from the
        store (``QueuePosition.left``, docs/design.md section 2)."""
        with self._lock:
            found = self._admitted_views.get(key)
        if found is None or (token is not None and found[0] != token):
            return None
        return found[1]

    def key_reused(self, key: str) -> None:
        """``key`` is about to name a new entry (a store whose keys are reused): the
        admitted view kept for its previous entry is dropped, so a view found under a
        key is never that of an entry older than the one a waiter listed."""
        with self._lock:
            self._admitted_views.pop(key, None)

    def deleted_event(self, key: str, token: int | None = None) -> EntryDeleted:
        """The event for the watched entry ``key``'s deletion, with its admitted view
        when it was ours (:meth:`admitted_view`)."""
        return EntryDeleted(key, self.admitted_view(key, token))

    def gone_state(self, key: str, token: int | None = None) -> EntryState | None:
        """An Arm step's answer for ``key`` found gone: None, or its admitted view when
        it was ours (:meth:`admitted_view`)."""
        view = self.admitted_view(key, token)
        return None if view is None else EntryState(held=True, left_view=view)

    def capacity_answer(self) -> tuple[int, int]:
        """``(capacity, version)`` as last applied, read together: what an enqueue
        answers with (``Enqueued.capacity``, ``Enqueued.capacity_version``)."""
        with self._lock:
            return self.capacity, self._capacity_version

    # -- job slots: what a driver sent for each entry, so that leaving deletes them --
    def slot_sending(self, key: str, index: int) -> None:
        """A create of slot ``index`` for our entry ``key`` is about to be sent."""
        with self._lock:
            self._slot_records.setdefault(key, {})[index] = None

    def slot_answered(self, key: str, index: int, token: int | None) -> None:
        """The create of slot ``index`` for ``key`` made its record with ``token``, or
        (None) another entry holds the index."""
        with self._lock:
            records = self._slot_records.setdefault(key, {})
            if token is None:
                records.pop(index, None)
            else:
                records[index] = token

    def slots_leaving(self, key: str) -> dict[int, int | None]:
        """The slot records made (or maybe made) for ``key``, which leaves now: what
        its delete request deletes with it."""
        with self._lock:
            return self._slot_records.pop(key, {})

    def forget_mark(self, key: str) -> None:
        """The entry ``key`` leaves: a mark kept for a capacity decrease is dropped."""
        with self._lock:
            self._unmarked.pop(key, None)

    # -- the store's side: each step a program (``runner.py``), run by either face --
    @abstractmethod
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        """Create a fresh entry of ``waiter.weight`` and list the entries lower than it
        (and the capacity, when it changed): the Enqueue step. Retries within
        ``deadline`` while the store cannot be reached; AcquireTimeout when it passes."""

    @abstractmethod
    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        """Read each key and watch it: the Arm step. A deletion posts EntryDeleted, a
        held mark EntryHeld or EntryMarked, to ``waiter`` for its current generation."""

    @abstractmethod
    def relist(self, waiter: Waiter, deadline: Deadline) -> Program[Sequence[Entry] | SessionLost]:
        """The entries lower than the waiter's own, listed afresh (no watches)."""

    @abstractmethod
    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        """Write the held mark on our entry without waiting for the reply (safety never
        depends on it); ``on_lost`` when the entry turns out to be gone. Must not
        re-create an entry that is gone, and must not block (the event loop calls it)."""

    @abstractmethod
    def abandon(self, waiter: Waiter) -> Program[None]:
        """Remove the waiter's entry if it exists (exact key, or found by entry id after
        a lost create reply): the reply within the request timeout, then retried in the
        background; never raises but an interrupt (the delete goes on)."""

    @abstractmethod
    def abandon_nowait(self, waiter: Waiter) -> None:
        """:meth:`abandon`, started and not waited for (an acquire program closed where
        nothing can be awaited): the delete goes on in the background, also when the
        create's reply is still on its way (it finds the entry by its id)."""

    @abstractmethod
    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        """Call ``on_lost`` when the holder's entry is deleted, until ``remove(key)``
        (the holder's own held mark does not end the watch). Must not block."""

    @abstractmethod
    def remove(self, key: str) -> Program[None]:
        """Delete the holder's own entry: the reply within the request timeout, then
        retried in the background; never raises but an interrupt."""

    @abstractmethod
    def status(self) -> Program[Status]:
        """Capacity, holders and waiters in queue order, within the request timeout;
        SemaphoreNotFound once the capacity record is gone (never a cached capacity)."""

    @abstractmethod
    def set_capacity(self, capacity: int) -> Program[None]:
        """Store a new capacity (validated by the caller), within the request timeout."""

    @abstractmethod
    def transaction(self, key: str, token: int) -> FencedTransaction:
        """A transaction fenced by the entry ``key`` created with ``token`` (no I/O)."""

    # -- job slots (``Capabilities(slots=True)``: the backend's queue class defines both) --
    def list_slots(
        self, waiter: Waiter, deadline: Deadline
    ) -> Program[frozenset[int] | SessionLost]:
        """The ListSlots step: the indices of the semaphore's slot records."""
        raise SlotsNotSupported(self.backend.scheme)

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> Program[int | frozenset[int] | SessionLost]:
        """The TakeSlot step for the waiter's admitted entry: create the record of
        slot ``index`` if there is none, on the session, only while the entry exists
        (``_core.slots.TakeSlot``). Answers its token; a fresh listing when another entry
        holds the index; SessionLost when our entry is gone. A retry after a lost reply
        adopts a record that names our entry. Call :meth:`slot_sending` before the
        create and :meth:`slot_answered` after it."""
        raise SlotsNotSupported(self.backend.scheme)


Q = TypeVar("Q", bound=QueueDriver)
T = TypeVar("T")


def queues_of(kind: type[Q], pairs: Sequence[tuple[QueueDriver, T]]) -> list[tuple[Q, T]]:
    """``acquire_all``'s ``(driver, waiter or key)`` pairs as the backend's own queues
    (its hooks are only ever given those)."""
    out = []
    for driver, other in pairs:
        assert isinstance(driver, kind), driver
        out.append((driver, other))
    return out


def _ignore(why: str) -> None:
    """A deferred mark's holder learns of its entry's loss from its session."""
