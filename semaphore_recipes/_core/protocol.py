"""The acquire protocol as a sans-I/O generator.

:func:`acquire_protocol` yields *steps* (what to ask the store, or to wait for an
event) and receives their answers. The sync driver (``semaphore.py``) answers with
blocking calls; the asyncio face (``aio/semaphore.py``) answers with awaits. The logic (admission,
whom to watch, one deadline, re-entering the queue after a session loss) exists only
here. The driver owns cleanup: on any exception
out of the generator it removes the entry of the last :class:`Enqueue` it answered.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass

from ..errors import AcquireTimeout, BackendUnavailable, Draining, WouldBlock
from .deadline import Deadline
from .queue import Admitted, Entry, EntryState, QueuePosition
from .slots import ListSlots, Slot, TakeSlot, take_slots

# ---- steps: what the protocol asks its driver to do -------------------------------


@dataclass(frozen=True)
class Enqueue:
    """Create a fresh entry (new id) and list the lower entries, in one round trip where
    the store allows; the capacity comes with the answer (read again only when it changed).
    A ZooKeeper client cycling alone may skip the listing (docs/design.md section 9).
    Answer: :class:`Enqueued`.

    ``first``: the acquire's first try. Its reply is awaited even when the caller's
    deadline is shorter than a round trip (``timeout=0`` means "only if it can be granted
    now", which takes one reply to know): the driver bounds it by the request timeout."""

    first: bool


@dataclass(frozen=True)
class Enqueued:
    """``later_entries``: the listing already held entries created after ours.
    ``capacity_version``: the store version of ``capacity`` (see CapacityChanged).
    ``lower_complete``: False when ``lower`` holds only the nearest lower entries (at
    least ``capacity + 1`` of them, or all): a store that can list the nearest entries
    alone saves a waiter far back in a long queue the listing of all of it. A
    :class:`Relist` is always answered with every lower entry."""

    me: Entry
    lower: tuple[Entry, ...]
    capacity: int
    later_entries: bool
    capacity_version: int
    lower_complete: bool = True
    #: a store whose writes decide admission (``server_admission``): its write admitted
    #: our entry. (An empty ``lower`` does not say it: an entry heavier than a capacity
    #: lowered meanwhile waits at the head.) Ignored where the client decides.
    admitted: bool = False
    #: ``admitted`` by a write that also gave our entry its job slots (a store that
    #: decides them at admission, for an acquire with ``slot=True``): the protocol
    #: takes no slot step. None: the store did not decide them.
    slots: tuple[Slot, ...] | None = None
    #: the semaphore drains (its stored config says so, as of ``capacity_version``):
    #: the acquire fails with Draining and its entry leaves
    draining: bool = False


@dataclass(frozen=True)
class Arm:
    """Read each key and watch it (ZooKeeper: a one-shot watch; etcd: a watch from the
    read's revision + 1, kept across held marks). Answer: ``{key: EntryState, or None if
    gone}``, or SessionLost when the session ended meanwhile."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class Peek:
    """Read each key without watching it (only for a store that declares
    ``peek_before_arming``). Answer: as :class:`Arm`'s."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class Relist:
    """List the entries lower than ours again (our view went stale: see QueuePosition).
    Answer: a sequence of :class:`Entry`, or SessionLost."""


@dataclass(frozen=True)
class AwaitEvent:
    """Wait for the next event, at most ``timeout`` seconds (None: no limit).
    Answer: an event, or None when the time ran out."""

    timeout: float | None


@dataclass(frozen=True)
class MarkHeld:
    """We are admitted. With ``now``, write the held mark on our entry at once, without
    waiting for the reply (safety never depends on it; it wakes a successor that may
    have listed us before we were admissible). Without ``now``, no successor can hold
    such a view: keep the entry unmarked unless the capacity is lowered while we hold
    (a successor that read the lower capacity may take us for not admitted).
    Answer: None."""

    me: Entry
    now: bool
    lower: tuple[str, ...] | None  # our view, recorded in the mark for successors
    #: its entries, kept by the driver for successors of this process (EntryDeleted);
    #: None: not recorded (an empty view would say nothing older is left)
    view: tuple[Entry, ...] | None = None
    #: the slots taken after admission (``acquire(slot=True)``), lowest index first
    slots: tuple[Slot, ...] = ()


Step = Enqueue | Arm | Peek | Relist | AwaitEvent | MarkHeld | ListSlots | TakeSlot

# ---- events: what the store tells a waiter ---------------------------------------


@dataclass(frozen=True)
class EntryDeleted:
    """Event: the watched entry ``key`` was deleted. ``admitted_view``: the entries of
    the view it was admitted with, when it was admitted through the waiter's own driver
    (None: not known; see QueuePosition.left). A holder that leaves before its
    successor read its held mark (a short hold, a busy event loop) would otherwise
    leave that successor a stale view and a fresh listing to make (on ZooKeeper, of
    the whole queue)."""

    key: str
    admitted_view: tuple[Entry, ...] | None = None


@dataclass(frozen=True)
class EntryHeld:
    """Event: the watched entry ``key`` wrote its held mark (its content unread)."""

    key: str


@dataclass(frozen=True)
class EntryMarked:
    """``key`` wrote its held mark, recording ``lower`` (see EntryState), and the watch
    on it is still armed: for stores whose watches persist and whose events carry the
    new value (etcd), so nothing needs to be read or watched again."""

    key: str
    lower: tuple[str, ...] | None


@dataclass(frozen=True)
class EntryChanged:
    """A watch on ``key`` fired and the event does not say how (read it again)."""

    key: str


@dataclass(frozen=True)
class CapacityChanged:
    """Event: the semaphore's stored capacity is ``capacity`` as of store ``version``
    (a number that grows with every write of the capacity: ZooKeeper's mzxid, etcd's
    mod_revision). A waiter keeps the newest version it has seen: an event can be older
    than the capacity its enqueue answered with, or overtaken by a newer one."""

    capacity: int
    version: int
    #: the stored config says the semaphore drains: a waiter fails with Draining
    draining: bool = False


@dataclass(frozen=True)
class StoreAdmitted:
    """Event: the store admitted our entry ``key``: its writes decide admission
    (``server_admission``; the protocol then never arms nor relists). ``slots``: the
    job slots the admitting write gave it (see ``Enqueued.slots``); None: not decided."""

    key: str
    slots: tuple[Slot, ...] | None = None


@dataclass(frozen=True)
class SessionLost:
    """The session (ZooKeeper session, etcd lease) ended: our entry is gone."""


@dataclass(frozen=True)
class BackendFailed:
    """The backend can no longer talk to the service at all (its client died): the
    acquire ends with BackendUnavailable."""

    reason: str


Event = (
    EntryDeleted
    | EntryHeld
    | EntryMarked
    | EntryChanged
    | CapacityChanged
    | StoreAdmitted
    | SessionLost
    | BackendFailed
)


def apply_event(position: QueuePosition, event: Event) -> None:
    """Fold one store event into a waiter's view (SessionLost is the caller's business;
    StoreAdmitted tells nothing a client-side decision uses)."""
    if isinstance(event, EntryDeleted):
        if event.admitted_view is None:
            position.deleted(event.key)
        else:
            position.left(event.key, event.admitted_view)
    elif isinstance(event, EntryHeld):
        position.marked_held(event.key)
    elif isinstance(event, EntryMarked):
        position.armed(event.key, EntryState(held=True, lower=event.lower))
    elif isinstance(event, EntryChanged):
        position.watch_fired(event.key)
    elif isinstance(event, CapacityChanged):
        position.set_capacity(event.capacity, event.version)


def told_to_drain(event: object, known_version: int) -> bool:
    """``event`` says the semaphore drains, as of a config newer than ``known_version``
    (the one the waiter's enqueue answered with: an older event is overtaken)."""
    return isinstance(event, CapacityChanged) and event.draining and event.version >= known_version


def acquire_protocol(
    name: str,
    weight: int,
    deadline: Deadline,
    *,
    blocking: bool = True,
    slots: bool = False,
    server_admission: bool = False,
    peek_first: bool = False,
) -> Generator[Step, object, Entry]:
    """Drive one ``acquire``: returns the admitted entry, once the driver has answered
    its :class:`MarkHeld` step (the driver sends the mark; the generator does not wait).
    With ``slots``, the admitted entry first takes ``weight`` distinct slots
    (:func:`take_slots`: ListSlots and TakeSlot steps), which MarkHeld carries;
    without it no such step is yielded. With ``server_admission`` the store decides
    (:func:`store_admission`).

    Raises Draining (the semaphore drains: the enqueue's answer or a later capacity
    event says so), WouldBlock (``blocking=False`` and not admitted at once), AcquireTimeout
    (deadline passed; a deadline that passed during the first enqueue still gets that
    enqueue's answer: one try) or BackendUnavailable (BackendFailed). Re-enters the queue
    with a fresh entry after a SessionLost.

    With ``peek_first`` (a store whose watch costs a round trip before its read), a
    head about to arm several entries reads them first (:class:`Peek`, once per
    entry of ours), and arms only what that read leaves in its way.
    """
    if server_admission:
        return (yield from store_admission(name, weight, deadline, blocking=blocking, slots=slots))
    first = True
    while True:
        answer = yield Enqueue(first=first)
        first = False
        assert isinstance(answer, Enqueued)
        if answer.draining:
            raise Draining(name)
        position = QueuePosition(
            answer.me,
            answer.lower,
            answer.capacity,
            capacity_version=answer.capacity_version,
            complete=answer.lower_complete,
        )
        # A successor that lists us after our listing sees at most the lower entries we
        # saw, so it finds us admissible by itself. Only successors already in our
        # listing, or ones that listed us while we waited, need the mark.
        mark_now = answer.later_entries
        may_peek = peek_first
        while True:
            probe = position.keys_to_probe()
            if probe:  # a long queue's stale view: read its entries, not the queue
                if not (yield from _arm(position, probe)):
                    break  # our entry died with the session: enqueue again
                position.probed()
                continue
            if position.stale:
                listing = yield Relist()
                if isinstance(listing, SessionLost):
                    break
                assert isinstance(listing, (list, tuple))
                position.relisted(listing)
            decision = position.decision()
            if isinstance(decision, Admitted):
                taken: tuple[Slot, ...] = ()
                if slots:
                    got = yield from take_slots(position.me, weight)
                    if got is None:
                        break  # our entry is gone, its records with it: enqueue again
                    taken = got
                yield MarkHeld(
                    position.me,
                    now=mark_now,
                    lower=position.lower_keys(),
                    view=position.lower,
                    slots=taken,
                )
                return position.me
            if not blocking:
                raise WouldBlock(f"semaphore {name!r}: {weight} permit(s) not available now")
            if deadline.expired():  # not before arming: a watch we would never wait on
                raise AcquireTimeout(f"semaphore {name!r}: no {weight} permit(s) in time")
            mark_now = True
            keys = position.keys_to_arm(decision)
            if may_peek and decision.head and len(keys) > 1:
                # A head's view comes mostly from its predecessor's mark, made before
                # that one was admitted: under contention most of it is gone, and a
                # read tells so without the watches (docs/design.md section 7).
                may_peek = False
                if not (yield from _read(position, keys, watched=False)):
                    break  # our entry died with the session: enqueue again
                continue
            if keys:
                if not (yield from _arm(position, keys)):
                    break  # our entry died with the session: enqueue again
                continue
            event = yield AwaitEvent(deadline.remaining())
            if event is None:
                continue
            if isinstance(event, SessionLost):
                break  # our entry died with the session: enqueue again
            if isinstance(event, BackendFailed):
                raise BackendUnavailable(f"semaphore {name!r}: {event.reason}")
            if told_to_drain(event, position.capacity_version):
                raise Draining(name)
            apply_event(position, event)  # type: ignore[arg-type]


def _arm(position: QueuePosition, keys: tuple[str, ...]) -> Generator[Step, object, bool]:
    """Read and watch ``keys``, folding what was read into ``position``; False when the
    session ended meanwhile (our entry with it)."""
    return (yield from _read(position, keys, watched=True))


def _read(
    position: QueuePosition, keys: tuple[str, ...], *, watched: bool
) -> Generator[Step, object, bool]:
    """Read ``keys`` (and watch them: an Arm; or not: a Peek), folding what was read
    into ``position``; False when the session ended meanwhile (our entry with it)."""
    states = yield (Arm(keys) if watched else Peek(keys))
    if isinstance(states, SessionLost):
        return False
    assert isinstance(states, Mapping)
    for key in keys:
        position.read(key, states.get(key), watched=watched)
    return True


def store_admission(
    name: str, weight: int, deadline: Deadline, *, blocking: bool = True, slots: bool = False
) -> Generator[Step, object, Entry]:
    """:func:`acquire_protocol` for a store whose writes decide admission: admitted when
    the enqueue answers so (``Enqueued.admitted``) or when StoreAdmitted for our entry
    comes; no Arm, no Relist. MarkHeld is yielded at admission (the face makes the
    permit there) and marks nothing: the store's write did. With ``slots``, an
    admission that carries them (a store deciding slots in the admitting write) is
    taken as is; one that does not is followed by :func:`take_slots`."""
    first = True
    while True:
        answer = yield Enqueue(first=first)
        first = False
        assert isinstance(answer, Enqueued)
        if answer.draining:
            raise Draining(name)
        me = answer.me
        admitted = answer.admitted
        decided = answer.slots
        config_version = answer.capacity_version  # the newest config we know of
        while not admitted:
            if not blocking:
                raise WouldBlock(f"semaphore {name!r}: {weight} permit(s) not available now")
            if deadline.expired():
                raise AcquireTimeout(f"semaphore {name!r}: no {weight} permit(s) in time")
            event = yield AwaitEvent(deadline.remaining())
            if isinstance(event, SessionLost):
                break  # our entry died with the session: enqueue again
            if isinstance(event, BackendFailed):
                raise BackendUnavailable(f"semaphore {name!r}: {event.reason}")
            if told_to_drain(event, config_version):
                raise Draining(name)
            if isinstance(event, CapacityChanged):
                config_version = max(config_version, event.version)
            admitted = isinstance(event, StoreAdmitted) and event.key == me.key
            if admitted:
                assert isinstance(event, StoreAdmitted)
                decided = event.slots
        if not admitted:
            continue
        taken: tuple[Slot, ...] = ()
        if slots and decided is not None:
            taken = decided  # given by the admitting write: no round trip more
        elif slots:
            got = yield from take_slots(me, weight)
            if got is None:
                continue  # our entry is gone, its records with it: enqueue again
            taken = got
        yield MarkHeld(me, now=False, lower=None, slots=taken)
        return me
