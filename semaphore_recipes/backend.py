"""The backend seam: what a coordination store implements to carry the recipe.

A backend is one package with a :class:`Backend` subclass (the session, opening
semaphores), a :class:`QueueDriver` subclass (one semaphore's queue: the store's side
of the protocol steps of ``_core.protocol``) and a :class:`FencedTransaction` subclass,
plus one line in :mod:`semaphore_recipes.registry`. ``docs/design.md`` ("The backend
contract") lists what the store must offer; the contract suite (``tests/contract``)
is what a backend must pass. ``semaphore_recipes.memory`` is a complete backend written
against this module alone.

What the faces rely on, on connection loss and expiry: a backend publishes
:class:`SessionEvent` values to the permits (SUSPENDED when the connection is lost and
the session may still be alive, RESTORED when the same session is back, LOST with a
reason when it has ended), tells waiters to enter the queue again
(:meth:`Backend.requeue_waiters`) when their entries died with a session, and ends
everything with :meth:`Backend.fail` when it can never reach the store again.
"""

from __future__ import annotations

import enum
import itertools
import logging
import os
import queue
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, TypeVar

from ._core.codec import EntryData
from ._core.deadline import Deadline
from ._core.names import validate_capacity, validate_name, validate_open_capacity
from ._core.program import run_program, run_program_async
from ._core.protocol import (
    BackendFailed,
    CapacityChanged,
    Enqueued,
    EntryChanged,
    EntryDeleted,
    EntryHeld,
    EntryMarked,
    Event,
    SessionLost,
)
from ._core.queue import Entry, EntryState, nearest_needed
from ._core.slots import Slot
from ._core.status import EntryStatus, Status, split_queue
from ._interrupts import call_with_sigint_held
from ._shown import quoted, quoted_url, redact_url
from ._url import DEFAULT_REQUEST_TIMEOUT, ServiceURL
from .errors import NotSupported, SlotsNotSupported
from .instrumentation import NO_INSTRUMENTATION, Instrumentation

if TYPE_CHECKING:
    from .multi import MultiPermit, Wanted
    from .semaphore import Semaphore

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "Backend",
    "CapacityChanged",
    "Deadline",
    "Enqueued",
    "Entry",
    "EntryChanged",
    "EntryData",
    "EntryDeleted",
    "EntryHeld",
    "EntryMarked",
    "EntryState",
    "EntryStatus",
    "Event",
    "FencedTransaction",
    "QueueDriver",
    "ServiceURL",
    "SessionChange",
    "SessionEvent",
    "SessionLost",
    "SessionState",
    "Slot",
    "Status",
    "Waiter",
    "Write",
    "WriteKind",
    "call_with_sigint_held",
    "default_owner",
    "nearest_needed",
    "queues_of",
    "quoted",
    "quoted_url",
    "redact_url",
    "run_program",
    "run_program_async",
    "session_lost",
    "split_queue",
    "validate_capacity",
    "validate_name",
]

log = logging.getLogger("semaphore_recipes")
B = TypeVar("B", bound="Backend")


def default_owner() -> str:
    """What a backend's entries say made them, unless ``connect(owner=...)``."""
    return f"{socket.gethostname()}:{os.getpid()}"


# ---- the session, as permits and callers see it ----------------------------------------


class SessionChange(enum.Enum):
    """What happened to a backend's session, as told to its permits."""

    SUSPENDED = "suspended"  #: connection lost; the session may still be alive (unsafe)
    RESTORED = "restored"  #: the same session is connected again
    LOST = "lost"  #: the session ended (expired, lease gone, client dead): permits are gone


@dataclass(frozen=True)
class SessionEvent:
    """A session change and, for LOST, why (it ends up in the permit's log line)."""

    change: SessionChange
    reason: str = ""

    def __post_init__(self) -> None:
        if self.change is SessionChange.LOST and not self.reason:
            raise ValueError("a LOST session event says why")


SUSPENDED = SessionEvent(SessionChange.SUSPENDED)
RESTORED = SessionEvent(SessionChange.RESTORED)


def session_lost(reason: str) -> SessionEvent:
    """The LOST event, with why."""
    return SessionEvent(SessionChange.LOST, reason)


class SessionState(enum.Enum):
    """A backend's session right now (``backend.session_state``)."""

    CONNECTED = "connected"  #: the store answers; held permits are safe
    SUSPENDED = "suspended"  #: connection lost, the session may still be alive
    EXPIRED = "expired"  #: the session ended; a new one is made on the next request
    FAILED = "failed"  #: the client can never reach the store again
    CLOSED = "closed"  #: ``close()`` was called


# ---- one acquire in flight ---------------------------------------------------------------


class Waiter:
    """One ``acquire`` in flight: the entry it is creating or owns, and its inbox.

    A driver's ``enqueue`` calls :meth:`new_generation` once, :meth:`creating` before
    each create it sends (so an interrupted acquire can find its entry by id), and
    :meth:`created` once the store confirmed the entry. Events for the acquire go through
    :meth:`post` with the generation they were armed for: a post for an older generation
    (a watch set for an entry that died with its session) is dropped.
    """

    def __init__(self, weight: int, owner: str) -> None:
        self.weight = weight
        self.owner = owner
        self.generation = 0
        self.entry_id: str | None = None  #: the id of the entry being created (unique)
        self.key: str | None = None  #: the entry's key once the store confirmed it
        self.token: int | None = None  #: the entry's fencing token (store revision)
        self._inbox: queue.SimpleQueue[tuple[int, Event]] = queue.SimpleQueue()

    def new_generation(self) -> int:
        self.generation += 1
        self.entry_id = self.key = None
        self.token = None
        return self.generation

    def creating(self, entry_id: str | None) -> None:
        """The id of the entry about to be created (None: that attempt is over)."""
        self.entry_id = entry_id

    def created(self, key: str, token: int) -> None:
        """The store confirmed our entry ``key`` with fencing token ``token``."""
        self.key, self.token = key, token

    def post(self, generation: int, event: Event) -> None:
        """Thread-safe; called from the client library's threads."""
        self._inbox.put((generation, event))

    def post_session_lost(self, affected: Callable[[str | None], bool] | None = None) -> None:
        """Post SessionLost, if ``affected`` (given the entry id) says so. The generation
        is read before the entry id: a waiter that meanwhile started another attempt
        (a new generation) drops a post that was meant for the attempt it left."""
        generation = self.generation
        if affected is None or affected(self.entry_id):
            self.post(generation, SessionLost())

    def post_backend_failed(self, reason: str) -> None:
        self.post(self.generation, BackendFailed(reason))

    def session_ended(self) -> bool:
        """Drain the inbox (an admitted waiter is done with it): did the session end
        after the last event the protocol saw?"""
        ended = False
        while True:
            try:
                generation, event = self._inbox.get_nowait()
            except queue.Empty:
                return ended
            ended |= generation == self.generation and isinstance(event, SessionLost)

    def next_event(self, timeout: float | None) -> Event | None:
        """The next event of the current generation, or None when ``timeout`` passes."""
        try:
            while True:
                generation, event = self._inbox.get(timeout=timeout)
                if generation == self.generation:
                    return event
        except queue.Empty:
            return None


# ---- fenced writes ---------------------------------------------------------------------


class WriteKind(enum.Enum):
    CREATE = "create"  #: the key must not exist
    SET = "set"  #: the key must exist; its value is replaced
    DELETE = "delete"  #: the key must exist; it is deleted


@dataclass(frozen=True)
class Write:
    """One write of a fenced transaction."""

    kind: WriteKind
    key: str
    value: bytes = b""


class FencedTransaction(ABC):
    """Writes into the store's own key space that commit only while a permit is held.

    The same three operations on every backend, applied all or none by ``commit()``:
    :meth:`create` (the key must not exist), :meth:`set` (the key must exist) and
    :meth:`delete` (the key must exist). Keys are the store's: ZooKeeper paths inside
    the URL's chroot (the parent must exist), etcd keys as they are, memory keys as
    strings. ``commit()`` raises PermitLost when the fence fails (the permit was
    released, or its session or entry is gone), WriteConflict when the fence holds but
    an operation's condition fails (nothing is written), PermissionDenied when the store
    refuses the user, and BackendUnavailable when no answer came within the request
    timeout: then it may still have been applied (read back before committing again).
    A key is written at most once per transaction (ValueError before any I/O).
    """

    def __init__(self) -> None:
        self.writes: list[Write] = []

    def create(self, key: str, value: bytes = b"") -> FencedTransaction:
        """Create ``key`` with ``value``; the commit fails if it exists."""
        return self._add(Write(WriteKind.CREATE, key, value))

    def set(self, key: str, value: bytes) -> FencedTransaction:
        """Replace the value of ``key``; the commit fails if it does not exist."""
        return self._add(Write(WriteKind.SET, key, value))

    def delete(self, key: str) -> FencedTransaction:
        """Delete ``key``; the commit fails if it does not exist."""
        return self._add(Write(WriteKind.DELETE, key))

    def _add(self, write: Write) -> FencedTransaction:
        if not isinstance(write.key, str) or not write.key:
            raise TypeError(f"a key is a non-empty str, not {write.key!r}")
        if not isinstance(write.value, bytes):
            raise TypeError(f"a value is bytes, not {type(write.value).__name__}")
        if any(w.key == write.key for w in self.writes):
            raise ValueError(f"{write.key!r} is written twice in one transaction")
        self.writes.append(write)
        return self

    @abstractmethod
    def commit(self) -> None:
        """Apply every write, or none (see the class docstring for the errors)."""

    async def commit_async(self) -> None:
        """:meth:`commit` for the asyncio face (a backend with one overrides it)."""
        raise NotImplementedError(f"{type(self).__name__} has no asyncio face")


# ---- one semaphore's queue ---------------------------------------------------------------


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

    # -- the store's side --
    @abstractmethod
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Enqueued:
        """Create a fresh entry of ``waiter.weight`` and list the entries lower than it
        (and the capacity, when it changed): the Enqueue step. Retries within
        ``deadline`` while the store cannot be reached; AcquireTimeout when it passes."""

    @abstractmethod
    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost:
        """Read each key and watch it: the Arm step. A deletion posts EntryDeleted, a
        held mark EntryHeld or EntryMarked, to ``waiter`` for its current generation."""

    @abstractmethod
    def relist(self, waiter: Waiter, deadline: Deadline) -> Sequence[Entry] | SessionLost:
        """The entries lower than the waiter's own, listed afresh (no watches)."""

    @abstractmethod
    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        """Write the held mark on our entry without waiting for the reply (safety never
        depends on it); ``on_lost`` when the entry turns out to be gone. Must not
        re-create an entry that is gone."""

    @abstractmethod
    def abandon(self, waiter: Waiter) -> None:
        """Remove the waiter's entry if it exists (exact key, or found by entry id after
        a lost create reply); never raises; retried in the background if unreachable."""

    @abstractmethod
    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        """Call ``on_lost`` when the holder's entry is deleted, until ``remove(key)``
        (the holder's own held mark does not end the watch)."""

    @abstractmethod
    def remove(self, key: str) -> None:
        """Delete the holder's own entry now; never raises (background retry)."""

    @abstractmethod
    def status(self) -> Status:
        """Capacity, holders and waiters in queue order, within the request timeout;
        SemaphoreNotFound once the capacity record is gone (never a cached capacity)."""

    @abstractmethod
    def set_capacity(self, capacity: int) -> None:
        """Store a new capacity (validated by the caller), within the request timeout."""

    @abstractmethod
    def transaction(self, key: str, token: int) -> FencedTransaction:
        """A transaction fenced by the entry ``key`` created with ``token``."""

    # -- job slots (optional: ``has_slots``) --
    def list_slots(self, waiter: Waiter, deadline: Deadline) -> frozenset[int] | SessionLost:
        """The ListSlots step: the indices of the semaphore's slot records."""
        raise SlotsNotSupported(self.backend.scheme)

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> int | frozenset[int] | SessionLost:
        """The TakeSlot step for the waiter's admitted entry: create the record of
        slot ``index`` if there is none, on the session, only while the entry exists
        (``_core.slots.TakeSlot``). Answers its token; a fresh listing when another entry
        holds the index; SessionLost when our entry is gone. A retry after a lost reply
        adopts a record that names our entry. Call :meth:`slot_sending` before the
        create and :meth:`slot_answered` after it."""
        raise SlotsNotSupported(self.backend.scheme)

    async def list_slots_async(
        self, waiter: Waiter, deadline: Deadline
    ) -> frozenset[int] | SessionLost:
        """:meth:`list_slots`, awaited."""
        raise SlotsNotSupported(self.backend.scheme)

    async def take_slot_async(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> int | frozenset[int] | SessionLost:
        """:meth:`take_slot`, awaited."""
        raise SlotsNotSupported(self.backend.scheme)

    # -- the asyncio face (semaphore_recipes.aio), for a backend with ``has_async_face``.
    # Write each step once, as a program (``run_program``/``run_program_async``), and
    # run it blocking above and awaited here. ``mark_held``/``write_mark`` and
    # ``watch_entry`` are called from the event loop too: they must not block.
    async def enqueue_async(self, waiter: Waiter, deadline: Deadline) -> Enqueued:
        """:meth:`enqueue`, awaited."""
        raise NotImplementedError(f"{type(self).__name__} has no asyncio face")

    async def arm_async(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost:
        """:meth:`arm`, awaited."""
        raise NotImplementedError(f"{type(self).__name__} has no asyncio face")

    async def relist_async(
        self, waiter: Waiter, deadline: Deadline
    ) -> Sequence[Entry] | SessionLost:
        """:meth:`relist`, awaited."""
        raise NotImplementedError(f"{type(self).__name__} has no asyncio face")

    def abandon_nowait(self, waiter: Waiter) -> None:
        """:meth:`abandon`, started and not waited for (a cancelled acquire must not
        wait): the delete goes on in the background, also when the create's reply is
        still on its way (it finds the entry by its id)."""
        raise NotImplementedError(f"{type(self).__name__} has no asyncio face")

    async def abandon_async(self, waiter: Waiter) -> None:
        """:meth:`abandon`, awaited: the delete's confirmation within the request
        timeout, then the background; never raises but the task's cancellation (the
        delete goes on). By default :meth:`abandon_nowait`, not waiting for anything."""
        self.abandon_nowait(waiter)

    async def remove_async(self, key: str) -> None:
        """:meth:`remove`, awaited: the reply within the request timeout, then the
        background; never raises but the task's cancellation (the delete goes on)."""
        raise NotImplementedError(f"{type(self).__name__} has no asyncio face")

    async def status_async(self) -> Status:
        """:meth:`status`, awaited."""
        raise NotImplementedError(f"{type(self).__name__} has no asyncio face")

    async def set_capacity_async(self, capacity: int) -> None:
        """:meth:`set_capacity`, awaited."""
        raise NotImplementedError(f"{type(self).__name__} has no asyncio face")


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


# ---- the backend ---------------------------------------------------------------------------

#: what NotSupported names when a backend lacks ``acquire_all``'s hooks
MULTI = "acquire several semaphores at once (acquire_all)"


class Backend(ABC):
    """A session with a coordination store, and the semaphores opened over it.

    Made by :func:`semaphore_recipes.connect`. ``request_timeout`` (seconds) bounds every
    call but a waiting acquire. ``close()`` ends the session: the store removes the
    backend's entries with it (how soon: the backend's docs).

    For backend authors: the ``register_waiter``/``add_permit_listener`` bookkeeping is
    done here; a subclass reports its session with :meth:`publish`,
    :meth:`requeue_waiters` and :meth:`fail`.
    """

    #: The URL scheme (``zookeeper``, ``etcd``, ``memory``): set by each subclass.
    scheme: ClassVar[str]

    def __init__(self, *, owner: str, request_timeout: float) -> None:
        self.owner = owner
        self.request_timeout = request_timeout
        self._hub_lock = threading.Lock()
        self._waiters: set[Waiter] = set()
        self._permit_listeners: dict[int, Callable[[SessionEvent], None]] = {}
        self._listener_ids = itertools.count()
        #: told of every acquire and permit of both faces (``instrument()``)
        self.instrumentation: Instrumentation = NO_INSTRUMENTATION
        #: semaphores ``acquire_all`` opened by name, kept open (each holds a watch)
        self._opened_by_name: dict[str, Semaphore] = {}

    # -- made from a URL (by connect) --
    @classmethod
    @abstractmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> Backend:
        """Open a backend for ``url``: ValueError on a parameter it does not take (before
        any I/O), BackendUnavailable when the store does not answer in time,
        AuthenticationFailed when it refuses the credentials."""

    @classmethod
    def from_client(cls, client: object, *, owner: str | None = None, **options: str) -> Backend:
        """A backend over a client object the caller made (``registry`` lists which
        client types a backend takes); TypeError by default."""
        raise TypeError(f"the {cls.scheme} backend takes no client object")

    # -- what users call --
    def instrument(self, instrumentation: Instrumentation) -> None:
        """Report the acquires and permits of every semaphore of this backend (both
        faces) to ``instrumentation`` from now on, in place of the one before
        (:mod:`semaphore_recipes.instrumentation`; ``semaphore_recipes.prometheus``
        gives Prometheus metrics). No I/O."""
        if not isinstance(instrumentation, Instrumentation):
            raise TypeError(
                f"instrument() takes an Instrumentation, not {type(instrumentation).__name__}"
            )
        self.instrumentation = instrumentation
        instrumentation.attached(self)

    def semaphore(
        self,
        name: str,
        capacity: int | None = None,
        *,
        adopt_capacity: bool = False,
        create: bool = True,
    ) -> Semaphore:
        """The semaphore ``name``; created with ``capacity`` if it does not exist.

        Raises CapacityMismatch if it is stored with another capacity (unless
        ``adopt_capacity``), InvalidName/ValueError on bad input before any I/O.
        With ``create=False`` nothing is written: an existing semaphore is opened
        (``capacity`` None: the stored one) and SemaphoreNotFound is raised when there
        is none; read permission is enough (``status()``, monitoring).
        PermissionDenied when the store refuses the user; BackendUnavailable when it
        does not answer within the request timeout.
        """
        from .semaphore import Semaphore

        validate_name(name)
        checked = validate_open_capacity(capacity, create)
        driver = self.open_queue(name, checked, adopt_capacity=adopt_capacity, create=create)
        return Semaphore(driver, self, self.owner)

    def status(self, name: str) -> Status:
        """The status of the existing semaphore ``name`` (SemaphoreNotFound if none);
        writes nothing."""
        return self.semaphore(name, create=False).status()

    @abstractmethod
    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> QueueDriver:
        """The queue driver of semaphore ``name`` (arguments already validated)."""

    @abstractmethod
    def describe(self) -> str:
        """Where this backend is, for people: ``etcd at h1:2379 (prefix /app/)``; never
        a password or a token (:func:`redact_url` masks them in a URL)."""

    @property
    @abstractmethod
    def session_state(self) -> SessionState:
        """The session's state right now."""

    @abstractmethod
    def read(self, key: str) -> bytes | None:
        """The value of ``key`` in the store's own key space (the one fenced
        transactions write), or None; within the request timeout."""

    @abstractmethod
    def data_key(self, semaphore: str, name: str = "data") -> str:
        """A key for application data ``name`` kept with semaphore ``semaphore`` (under
        its node or prefix, apart from its entries; removed by :meth:`delete_semaphore`),
        for fenced transactions. InvalidName on a bad name (``validate_name``)."""

    @abstractmethod
    def delete_semaphore(self, name: str) -> None:
        """Delete what is stored of semaphore ``name``: its capacity, its entries and its
        data keys; nothing if it does not exist. For tests, demos and operators, when
        nothing uses it: a holder learns its entry is gone at its next fenced commit (at
        once with ``watch_entry``), and a waiter may re-create the semaphore."""

    @abstractmethod
    def close(self) -> None:
        """End the session (its entries go with it); within the request timeout. Held
        permits go LOST (``lost`` set) and acquires waiting on other threads or tasks
        raise BackendUnavailable, as :meth:`fail` does."""

    def __enter__(self: B) -> B:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"

    # -- the asyncio face (semaphore_recipes.aio): a backend that has one sets
    # ``has_async_face`` and overrides these; its queues override QueueDriver's async
    # hooks and its transactions ``commit_async``.
    has_async_face: ClassVar[bool] = False

    #: Does this store keep job slots (``acquire(slot=True)``)? One that does: its
    #: queues override :meth:`QueueDriver.list_slots` and :meth:`QueueDriver.take_slot`
    #: (and their async twins), delete an entry's slot records in the same request as
    #: the entry (``remove``, ``abandon``; the session's end takes both), and show
    #: them in ``status()`` (``EntryStatus.slots``).
    has_slots: ClassVar[bool] = False

    @classmethod
    async def from_url_async(cls, url: ServiceURL, *, owner: str | None = None) -> Backend:
        """:meth:`from_url` for the asyncio face, connecting without blocking the loop.
        The backend it returns is driven through its ``*_async`` methods only."""
        raise NotImplementedError(f"the {cls.scheme} backend has no asyncio face")

    async def open_queue_async(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> QueueDriver:
        """:meth:`open_queue`, awaited."""
        raise NotImplementedError(f"the {self.scheme} backend has no asyncio face")

    async def read_async(self, key: str) -> bytes | None:
        """:meth:`read`, awaited."""
        raise NotImplementedError(f"the {self.scheme} backend has no asyncio face")

    async def delete_semaphore_async(self, name: str) -> None:
        """:meth:`delete_semaphore`, awaited."""
        raise NotImplementedError(f"the {self.scheme} backend has no asyncio face")

    async def close_async(self) -> None:
        """:meth:`close`, awaited."""
        raise NotImplementedError(f"the {self.scheme} backend has no asyncio face")

    # -- several semaphores at once (``acquire_all``, docs/design.md section 2): a
    # backend that can create entries in several queues in one atomic request
    # overrides the three hooks below.
    @property
    def supports_acquire_all(self) -> bool:
        """Does this backend override the hooks below? ``acquire_all`` raises
        NotSupported before any I/O when it does not."""
        return self._overrides("enqueue_all", "delete_all", "transaction_all")

    @property
    def supports_acquire_all_async(self) -> bool:
        """The same for the asyncio face (the ``*_async`` hooks too)."""
        return self.has_async_face and self._overrides(
            "enqueue_all", "delete_all", "transaction_all", "enqueue_all_async", "delete_all_async"
        )

    def _overrides(self, *hooks: str) -> bool:
        return all(getattr(type(self), h) is not getattr(Backend, h) for h in hooks)

    def acquire_all(
        self,
        weights: Wanted,
        timeout: float | None = None,
        blocking: bool = True,
    ) -> MultiPermit:
        """Take ``weights[s]`` permits of each semaphore ``s`` at once, or none: see
        :func:`semaphore_recipes.multi.acquire_all`."""
        from .multi import acquire_all

        return acquire_all(self, weights, timeout=timeout, blocking=blocking)

    def existing_semaphore(self, name: str) -> Semaphore:
        """The existing semaphore ``name``, opened once per backend (``acquire_all``
        names them at every call: opening each time would cost a read and a capacity
        watch per call). SemaphoreNotFound when there is none."""
        with self._hub_lock:
            opened = self._opened_by_name.get(name)
        if opened is None:
            opened = self.semaphore(name, create=False)
            with self._hub_lock:
                opened = self._opened_by_name.setdefault(name, opened)
        return opened

    def enqueue_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> dict[str, Enqueued]:
        """The EnqueueAll step: create a fresh entry of ``waiter.weight`` in each
        driver's queue, all in **one** atomic request (so every queue orders two such
        requests alike), then list each queue's lower entries; answers by semaphore
        name. Waiter bookkeeping (``new_generation``, ``creating``, ``created``) as
        :meth:`QueueDriver.enqueue` does it; AcquireTimeout when ``deadline`` passes."""
        raise NotSupported(self.scheme, MULTI)

    def delete_all(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> None:
        """Delete each waiter's entry (its key, or found by its entry id after a lost
        create reply) in one atomic request; never raises (background retry, as
        :meth:`QueueDriver.remove` does)."""
        raise NotSupported(self.scheme, MULTI)

    def transaction_all(
        self, entries: Sequence[tuple[QueueDriver, str]], token: int
    ) -> FencedTransaction:
        """A transaction fenced on every ``(driver, entry key)``, all created with
        ``token`` (one atomic create gives them one)."""
        raise NotSupported(self.scheme, MULTI)

    async def enqueue_all_async(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> dict[str, Enqueued]:
        """:meth:`enqueue_all`, awaited (the asyncio face)."""
        raise NotSupported(self.scheme, MULTI)

    async def delete_all_async(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> None:
        """:meth:`delete_all`, awaited: the reply within the request timeout, then the
        background; never raises but the task's cancellation (the delete goes on)."""
        raise NotSupported(self.scheme, MULTI)

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
