"""One semaphore's queue in a store: the store's side of the protocol steps.

A backend's :class:`QueueDriver` subclass answers the steps of ``_core.protocol``
(enqueue, arm, relist, the held mark, leaving) and keeps what its successors in this
process need (admitted views, slot records in flight). On connection loss its requests
wait within their deadline; on expiry the entries it made are gone with the session
(the waiters re-enter the queue: ``waiter.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar, final

from .._core.codec import EntryData
from .._core.deadline import Deadline
from .._core.program import Program
from .._core.protocol import (
    Arm,
    CapacityChanged,
    Enqueue,
    Enqueued,
    Peek,
    Relist,
    SessionLost,
    Step,
)
from .._core.queue import Entry, EntryState
from .._core.ramp import RampPlan
from .._core.slots import ListSlots, TakeSlot
from .._core.status import Status
from ..errors import NotSupported, SlotsNotSupported
from ..instrumentation import report
from .fenced import FencedTransaction
from .waiter import Waiter

if TYPE_CHECKING:
    from .store import Backend

log = logging.getLogger("semaphore_recipes")


class DriverContractError(AssertionError):
    """A queue driver broke the seam's contract (a backend's bug, named in the message):
    every acquire through it fails, so the contract suite finds it."""


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
        #: the stored config says the semaphore drains (as of the capacity's version)
        self.draining = False
        # entry key -> {slot index: record token, None while its create is unanswered}
        self._slot_records: dict[str, dict[int, int | None]] = {}

    # -- shared bookkeeping --
    def register(self, waiter: Waiter) -> None:
        waiter.bind(self)
        with self._lock:
            self._waiters.add(waiter)
        self.backend.register_waiter(waiter)

    def unregister(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.discard(waiter)
        self.backend.unregister_waiter(waiter)

    def apply_capacity(self, capacity: int, version: int, draining: bool | None = None) -> None:
        """Apply a capacity read at store ``version``, a number that grows with every
        write of the capacity or the config (older reads are ignored): waiters are
        woken, and holders without a held mark write theirs if it went down.
        ``draining``: the config's drain flag, read with it (None: this read did not
        include it, the flag applied last stays); waiters are told when it is set."""
        with self._lock:
            if version < self._capacity_version:
                return  # an older read finishing late
            self._capacity_version = version
            old, self.capacity = self.capacity, capacity
            was_draining = self.draining
            if draining is not None:
                self.draining = draining
            now_draining = self.draining
            waiters = list(self._waiters)
            unmarked = list(self._unmarked.values()) if capacity < old else []
            if unmarked:
                self._unmarked.clear()
        if capacity == old and now_draining == was_draining:
            return
        if capacity != old:
            log.info("semaphore %r: capacity %d -> %d", self.name, old, capacity)
        if now_draining != was_draining:
            log.info("semaphore %r: %s", self.name, "draining" if now_draining else "resumed")
        for waiter in waiters:
            waiter.post(waiter.generation, CapacityChanged(capacity, version, now_draining))
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

    def gone_state(self, key: str, token: int | None = None) -> EntryState | None:
        """An Arm step's answer for ``key`` found gone: None, or its admitted view when
        it was ours (:meth:`admitted_view`). The base answers it for a driver's None."""
        view = self.admitted_view(key, token)
        return None if view is None else EntryState(held=True, left_view=view)

    def capacity_answer(self) -> tuple[int, int]:
        """``(capacity, version)`` as last applied, read together: what an enqueue
        answers with (``Enqueued.capacity``, ``Enqueued.capacity_version``)."""
        with self._lock:
            return self.capacity, self._capacity_version

    def with_draining(self, enqueued: Enqueued) -> Enqueued:
        """An enqueue's answer, saying whether the semaphore drains: the flag the
        enqueue's own read of the config applied (``apply_capacity``), or a newer one."""
        if not self.draining:
            return enqueued
        return dataclasses.replace(enqueued, draining=True)

    # -- job slots: what a driver sent for each entry, so that leaving deletes them (the
    # base keeps it around each TakeSlot step: :meth:`step`) --
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

    # -- what the faces run: each hook with what the base does around it --
    @final
    def step(self, waiter: Waiter, step: Step, deadline: Deadline) -> Program[object]:
        """The program answering the protocol's ``step`` for ``waiter``: the one table
        from the protocol's steps to this driver's hooks (both faces, both acquire
        shapes), with the bookkeeping of the base around them."""
        if isinstance(step, Arm):
            return self._arming(waiter, step.keys, deadline)
        if isinstance(step, Peek):
            return self._arming(waiter, step.keys, deadline, watch=False)
        if isinstance(step, Relist):
            return self._relisting(waiter, deadline)
        if isinstance(step, ListSlots):
            return self.list_slots(waiter, deadline)
        if isinstance(step, TakeSlot):
            return self._taking_slot(waiter, step.index, deadline)
        assert isinstance(step, Enqueue), step
        return self._entering(waiter, deadline)

    def _relisting(
        self, waiter: Waiter, deadline: Deadline
    ) -> Program[Sequence[Entry] | SessionLost]:
        known = self.known_lower(waiter)
        if known is not None:
            return known
        report(self.backend.instrumentation.queue_listed, self.name)
        return (yield from self.relist(waiter, deadline))

    def _entering(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        before = waiter.generation
        enqueued = yield from self.enqueue(waiter, deadline)
        if not (
            waiter.generation > before
            and waiter.entry_id is not None
            and waiter.key == enqueued.me.key
            and waiter.token is not None
        ):
            raise DriverContractError(
                f"{type(self).__name__}.enqueue must call waiter.new_generation(), "
                "waiter.creating(id) before its create and waiter.created(key, token) "
                f"for the entry it answers ({enqueued.me.key!r})"
            )
        return self.with_draining(enqueued)

    def _arming(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline, *, watch: bool = True
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        read = self.arm if watch else self.peek
        states = yield from read(waiter, keys, deadline)
        if isinstance(states, SessionLost):
            return states
        # an entry found gone that was admitted here: the view it was admitted with
        return {
            key: self.gone_state(key) if state is None else state for key, state in states.items()
        }

    def _taking_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> Program[int | frozenset[int] | SessionLost]:
        key = waiter.key
        assert key is not None
        self.slot_sending(key, index)  # maybe made from now on: leaving deletes it
        taken = yield from self.take_slot(waiter, index, deadline)
        self.slot_answered(key, index, taken if isinstance(taken, int) else None)
        return taken

    @final
    def release_entry(self, key: str) -> Program[None]:
        """A holder's release: its entry and its slot records go (:meth:`remove`)."""
        yield from self.releasing(key)()

    @final
    def releasing(self, key: str) -> Callable[[], Program[None]]:
        """A holder's release as a maker of its program: each program removes the entry
        and the same slot records. The asyncio face runs one more when its task is
        cancelled during the first (which may have been applied: :meth:`remove`)."""
        self.forget_mark(key)
        records = self.slots_leaving(key)
        return lambda: self.remove(key, records)

    @final
    def abandon_entry(self, waiter: Waiter) -> Program[None]:
        """An acquire's way out without a permit: its entry goes (:meth:`abandon`)."""
        yield from self.abandon(waiter, self._leaving(waiter))

    def _leaving(self, waiter: Waiter) -> dict[int, int | None]:
        key = waiter.key
        if key is None:
            return {}
        self.forget_mark(key)
        return self.slots_leaving(key)

    # -- the store's side: each step a program (``runner.py``), run by either face --
    @abstractmethod
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        """Create a fresh entry of ``waiter.weight`` and list the entries lower than it
        (and the capacity, when it changed): the Enqueue step. Retries within
        ``deadline`` while the store cannot be reached; AcquireTimeout when it passes."""

    # -- admission decided here, from listings and watches (not by a store whose write
    # decides it: ``Capabilities(server_admission=True)``); checked on ``queue_type`` --
    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        """Read each key and watch it: the Arm step; None for a key found gone. A
        deletion is told with ``waiter.entry_deleted``, a held mark posts EntryHeld or
        EntryMarked, to ``waiter`` for the generation it was armed for."""
        raise _server_decides(self)

    def peek(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        """Read each key without watching it: the Peek step of a store that declares
        ``peek_before_arming`` (checked on ``queue_type``); answered as :meth:`arm`."""
        raise DriverContractError(
            f"{type(self).__name__}: peek is asked only of a store that declares "
            "peek_before_arming, and such a store defines it"
        )

    def relist(self, waiter: Waiter, deadline: Deadline) -> Program[Sequence[Entry] | SessionLost]:
        """The entries lower than the waiter's own, listed afresh (no watches); each
        call is told to the instrumentation (``queue_listed``)."""
        raise _server_decides(self)

    def known_lower(self, waiter: Waiter) -> Sequence[Entry] | None:
        """A Relist answered without a request: every entry lower than the waiter's
        that may still exist, from what this process knows of the queue (a superset
        of the lower set, as a listing is); None (here: always) to list."""
        return None

    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        """Write the held mark on our entry without waiting for the reply (safety never
        depends on it); ``on_lost`` when the entry turns out to be gone. Must not
        re-create an entry that is gone, and must not block (the event loop calls it)."""
        raise _server_decides(self)

    @abstractmethod
    def confirm(self, waiter: Waiter, deadline: Deadline) -> Program[bool]:
        """One round trip, for an admitted ``waiter`` whose session the backend could
        not vouch for (``Backend.session_vouched``): True when its entry is still in the
        queue under a live session, as of a request sent now; False when it is gone
        (the waiter then enters the queue again). A store whose session renewal is a
        call of its own counts it as one."""

    @abstractmethod
    def abandon(self, waiter: Waiter, slot_records: Mapping[int, int | None]) -> Program[None]:
        """Remove the waiter's entry if it exists (exact key, or found by entry id after
        a lost create reply) and ``slot_records`` (index -> token, None when maybe made)
        with it: the reply within the request timeout, then retried in the background;
        never raises but an interrupt (the delete goes on)."""

    @abstractmethod
    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        """Call ``on_lost`` when the holder's entry is deleted, until ``remove(key)``
        (the holder's own held mark does not end the watch). Must not block."""

    @abstractmethod
    def remove(self, key: str, slot_records: Mapping[int, int | None]) -> Program[None]:
        """Delete the holder's own entry and ``slot_records`` with it, in one request:
        the reply within the request timeout, then retried in the background; never
        raises but an interrupt. May run again after an attempt that was applied (a
        cancelled asyncio release): what is gone already is no error."""

    @abstractmethod
    def status(self) -> Program[Status]:
        """Capacity, holders and waiters in queue order, within the request timeout;
        SemaphoreNotFound once the capacity record is gone (never a cached capacity)."""

    @abstractmethod
    def set_capacity(self, capacity: int) -> Program[None]:
        """Store a new capacity (validated by the caller), within the request timeout."""

    def set_draining(self, draining: bool) -> Program[None]:
        """Store the config's drain flag beside the capacity, keeping the capacity
        (``Capabilities(drain=True)``), within the request timeout: every backend of
        the store that opened the semaphore is told, as of a capacity change."""
        raise NotSupported(self.backend.scheme, "drain a semaphore", "drain")

    def write_ramp(self, capacity: int, ramp: RampPlan | None, version: int) -> Program[int | None]:
        """One step of a capacity ramp (``Capabilities(ramp=True)``): store ``capacity``
        and the plan ``ramp`` (None: no plan left) beside it, as an ordinary capacity
        change, only if the config's version is still ``version`` (the
        ``Status.config_version`` read): the new version, or None when the config
        changed meanwhile (nothing written). The drain flag is kept. Within the
        request timeout; every backend that opened the semaphore is told."""
        raise NotSupported(self.backend.scheme, "ramp a capacity", "ramp")

    # -- revocation (``Capabilities(revoke=True)``: the backend's queue class defines all
    # three; docs/design.md "Revocation") --
    def request_revoke(self, key: str, token: int) -> Program[bool]:
        """Write a revoke request on the entry ``key`` if it still has ``token`` (never
        re-creating it, never changing what the protocol reads of it), within the request
        timeout: False when it is gone. Every backend watching it (``watch_revocation``)
        is told."""
        raise NotSupported(self.backend.scheme, "revoke a holder's permits", "revoke")

    def watch_revocation(self, key: str, token: int, on_revoke: Callable[[], None]) -> None:
        """Call ``on_revoke`` once when a revoke request is on our held entry ``key``
        (written before or after this call), through the watch ``watch_entry`` keeps,
        until ``remove(key)``. Called right before ``watch_entry``; must not block."""
        raise NotSupported(self.backend.scheme, "revoke a holder's permits", "revoke")

    def remove_revoked(self, key: str, token: int) -> Program[bool]:
        """Delete the entry ``key`` (and its slot records) only if it still has
        ``token``, as a session's end would: its holder's fence fails, and its
        successors are admitted as after a release. False when it was gone already."""
        raise NotSupported(self.backend.scheme, "revoke a holder's permits", "revoke")

    @abstractmethod
    def transaction(self, key: str, token: int) -> FencedTransaction:
        """A transaction fenced by the entry ``key`` created with ``token`` (no I/O)."""

    # -- job slots (``Capabilities(slots=True)``: the backend's queue class defines both) --
    def list_slots(
        self, waiter: Waiter, deadline: Deadline
    ) -> Program[frozenset[int] | SessionLost]:
        """The ListSlots step: the indices of the semaphore's slot records."""
        raise _no_slot_steps(self)

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> Program[int | frozenset[int] | SessionLost]:
        """The TakeSlot step for the waiter's admitted entry: create the record of
        slot ``index`` if there is none, on the session, only while the entry exists
        (``_core.slots.TakeSlot``). Answers its token; a fresh listing when another entry
        holds the index; SessionLost when our entry is gone. A retry after a lost reply
        adopts a record that names our entry. (The base notes the record as maybe
        made before, and as made or not from the answer: leaving deletes it.)"""
        raise _no_slot_steps(self)


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


def _server_decides(driver: QueueDriver) -> DriverContractError:
    return DriverContractError(
        f"{type(driver).__name__}: admission is decided by the store's writes "
        "(server_admission): the protocol never asks it to arm, relist or mark"
    )


def _no_slot_steps(driver: QueueDriver) -> Exception:
    """A slot step asked of a driver without the hook: a store without slots (the faces
    refuse ``slot=True`` before any I/O), or one whose admission gives them
    (``admission_slots``) but answered an admission without them."""
    if driver.backend.capabilities.admission_slots:
        return DriverContractError(
            f"{type(driver).__name__}: slots are decided at admission (admission_slots), "
            "but an admission of an acquire with slot=True came without them"
        )
    return SlotsNotSupported(driver.backend.scheme)


def _ignore(why: str) -> None:
    """A deferred mark's holder learns of its entry's loss from its session."""
