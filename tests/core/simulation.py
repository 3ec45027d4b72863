"""An in-memory model of the store for checking the queue protocol.

The store orders entries, keeps one-shot watches, and delivers events to clients in
order. Each simulated client runs the real :func:`acquire_protocol` generator (one
semaphore) or :func:`multi_acquire_protocol` (several semaphores at once: one entry in
each queue, created in one atomic transaction that gives them all the same order); the
scheduler interleaves every store operation (create, listing, each watch read, each
held mark, deletions, crashes, session losses, timeouts, capacity changes) at random.
Checks, per queue: admissions respect the prefix rule (which is FIFO: an entry admitted
means every entry before it is admissible), with no capacity decrease the weights
admitted never exceed the capacity, and no waiter sleeps while it could be admitted in
a queue; no store event wakes more than a bounded number of waiters; and every run
completes: once holders stop coming, every waiter is granted (no deadlock).

Job slots (``slots=True``: single acquires take their slots after admission, through
the real :func:`take_slots` steps): the slots held are distinct at every grant, each
is a record of the store naming the holder's entry, and each index is below the
capacity it was granted under (the largest capacity any live holder of the queue was
admitted under; with no capacity change, the capacity).

A store that decides admission (``server_admission=True``, Redis's scripts): at every
change of a queue (a create, a deletion, a capacity change) the store admits, from the
head, the waiters that now fit by the prefix rule, marks them held and tells each one's
client StoreAdmitted, but the creator, whose create's answer says it (taken with the
create, atomically). The protocol then must never arm nor relist, and a client must take
itself for admitted only once the store admitted it; the other checks are the same.
With ``admission_slots`` (Redis's scripts too) that admission also gives a slot-taking
entry its slots, the lowest indices no live holder's record has, and they come with the
admission (``StoreAdmitted.slots``, ``Enqueued.slots``): no slot step may follow, and the
slot checks are the same.

Draining (``drains=True``): an operator sets and clears a queue's drain flag now and
then, a new version of the config posted to the waiters as a capacity change is (and
reordered with them). An enqueue's answer carries the flag; a client refused, or told
by an event, leaves its queues as a timeout does (its entries deleted); a store that
decides admission admits nobody while the flag is set. Checks: once nothing is in
flight, nobody waits in a draining queue (every waiter was told and left, none sleeps
on a lost or misordered event), and after a final resume every run still completes and
leaves no entry behind.

Forced revokes (``revokes=True``): an operator removes a holder's entries, as the end
of its session would but with the holder still running (``revoke(force=True)``): the
holder's permit no longer counts (its fence fails) and it only releases later, which
removes nothing more; the successors are admitted by the same watches and sweeps. The
usual checks (prefix rule, no lost wakeup, every run completes, no entry left) hold.
Revoke requests are modelled too (client-decided admission): a write on an entry,
which its watchers see as the stores' watches show it: ZooKeeper's one-shot watch
fires as for a held mark (``EntryHeld``), also on an entry not marked (or a waiter's:
the revoker's status read may be older than a capacity decrease); etcd's persistent
watch carries the value (a marked entry's mark again, else ``EntryChanged``).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field

from semaphore_recipes._core import queue as core_queue
from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.multi import (
    EnqueueAll,
    EnqueuedAll,
    InQueue,
    MultiStep,
    QueueEvent,
    multi_acquire_protocol,
)
from semaphore_recipes._core.protocol import (
    Arm,
    AwaitEvent,
    CapacityChanged,
    Enqueue,
    Enqueued,
    EntryChanged,
    EntryDeleted,
    EntryHeld,
    EntryMarked,
    Event,
    MarkHeld,
    Peek,
    Relist,
    SessionLost,
    Step,
    StoreAdmitted,
    acquire_protocol,
)
from semaphore_recipes._core.queue import Entry, EntryState
from semaphore_recipes._core.slots import ListSlots, Slot, TakeSlot, lowest_free
from semaphore_recipes.errors import AcquireTimeout, Draining


class LostWakeup(AssertionError):
    pass


class Deadlock(LostWakeup):
    """Waiters remain, none is admissible in all its queues, and nobody holds a permit."""


class OverAdmission(AssertionError):
    pass


class SlotViolation(AssertionError):
    """Two holders share a slot, or a slot was granted outside the range."""


@dataclass
class StoredEntry:
    queue: str
    key: str
    order: int
    weight: int
    held: bool = False
    lower: tuple[str, ...] | None = None  # what the held mark records
    wants_slots: bool = False  # a single acquire with slots (admission_slots: given at admission)
    slots: tuple[Slot, ...] | None = None  # given by the admission (admission_slots)


@dataclass
class Client:
    cid: int
    #: permits asked of each semaphore; more than one: a multi-acquire
    weights: dict[str, int]
    timeout: bool
    gen: Generator[Step | MultiStep, object, object] | None = None
    step: Step | MultiStep | None = None
    state: str = "new"  # new | waiting | holding | done
    keys: dict[str, str] = field(default_factory=dict)  # our entry in each queue
    created: bool = False  # every create happened; the listing is still to come
    step_queue: str = ""  # the queue of the Arm / Relist in progress
    to_arm: list[str] = field(default_factory=list)
    watching: bool = True  # the reads of to_arm set watches (an Arm, not a Peek)
    peeks: int = 0
    arm_results: dict[str, EntryState | None] = field(default_factory=dict)
    events: deque[Event | QueueEvent] = field(default_factory=deque)
    clock: float = 0.0
    #: per queue, the largest capacity stored since the entry was created: what may admit it
    capacity_bound: dict[str, int] = field(default_factory=dict)
    admitted: set[str] = field(default_factory=set)  # queues that admitted us
    #: queues whose held mark is to be written, with the view it records
    mark_pending: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    #: queues that admitted us without a mark: marked if their capacity drops
    unmarked: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    relists: int = 0
    slots: tuple[Slot, ...] = ()  # the slots held (granted with slots)
    #: server admission: per queue, did the create admit our entry (its answer says so)
    create_admitted: dict[str, bool] = field(default_factory=dict)
    #: admission_slots: the slots the create's admission gave (its answer carries them)
    create_slots: dict[str, tuple[Slot, ...] | None] = field(default_factory=dict)

    @property
    def multi(self) -> bool:
        return len(self.weights) > 1

    @property
    def key(self) -> str | None:
        """The entry of a single-semaphore client."""
        return next(iter(self.keys.values()), None)


class Simulation:
    def __init__(
        self,
        rng: random.Random,
        *,
        clients: int,
        capacity: int,
        max_weight: int,
        capacity_changes: bool,
        mark_held: bool = True,
        record_lower: bool = True,
        persistent_watches: bool = False,
        stale_capacity_events: bool = True,
        deleted_views: bool = True,
        older_views: bool = False,
        queues: int = 1,
        weights: list[dict[str, int]] | None = None,
        atomic_create: bool = True,
        timeouts: bool = True,
        slots: bool = False,
        slot_records_die_later: bool = False,
        stale_slot_listing: bool = False,
        server_admission: bool = False,
        admission_slots: bool = False,
        store_mutation: str = "",
        drains: bool = False,
        revokes: bool = False,
        relists: str = "whole",
        peeks: bool = False,
    ) -> None:
        """``queues`` > 1: several semaphores ``q0``, ``q1``... of ``capacity`` each,
        each client asking random weights of a random non-empty subset of them (or the
        given ``weights``). ``atomic_create=False`` is the mutation that creates a
        request's entries one by one, each with its own order. ``slots``: single
        acquires take job slots; ``slot_records_die_later`` is the mutation whose slot
        records outlive their entry for a while (deleted by a request of their own);
        ``stale_slot_listing`` the one whose lost race for an index answers with the
        first listing and that index, not a fresh listing. ``server_admission``: the
        store decides admission (see the module's docstring), and with
        ``admission_slots`` gives the slots in the admitting write; ``store_mutation``
        breaks that store: ``"untold"`` admits without telling, ``"forget_holders"``
        admits as if the holders weighed nothing, ``"slots_ignore_holders"`` gives
        slots from 0 whatever the holders hold. ``relists``: ``"whole"`` answers a
        Relist with the lower entries; ``"superset"`` adds, at random, lower entries
        deleted since the client's create (ZooKeeper answers from a process's record of
        the queue: ``zookeeper/_known_queue.py``); the mutation ``"missing"`` leaves out
        a live lower entry at random (a record taken before the client's create).
        ``peeks``: the protocol runs with ``peek_first`` (a head reads before it
        watches: etcd), each read of a Peek interleaved with the other actions as an
        Arm's are."""
        assert not admission_slots or (server_admission and slots)
        self.rng = rng
        self.server_admission = server_admission
        self.admission_slots = admission_slots
        self.store_mutation = store_mutation
        self.store: dict[str, StoredEntry] = {}
        self.relists = relists
        self.peeks = peeks
        # deleted entries, each with next_order at its deletion (relists="superset")
        self.gone: list[tuple[StoredEntry, int]] = []
        self.watches: dict[str, set[int]] = {}
        self.names = ["sim"] if queues == 1 else [f"q{i}" for i in range(queues)]
        self.capacities = {name: capacity for name in self.names}
        self.capacity_changes = capacity_changes
        self.decreased: set[str] = set()
        self.mark_held = mark_held
        self.record_lower = record_lower
        # etcd-like: a watch outlives a held mark, whose event carries the mark
        self.persistent_watches = persistent_watches
        # capacity events posted during an enqueue stay in the inbox (as a driver's do),
        # and two of them may arrive in the other order
        self.stale_capacity_events = stale_capacity_events
        self.atomic_create = atomic_create
        self.capacity_versions = {name: 0 for name in self.names}
        self.drains = drains
        self.draining = {name: False for name in self.names}  # the drain flag beside it
        self.refused = 0  # acquires that ended with Draining
        self.revokes = revokes
        self.revoked = 0  # holders whose entries a forced revoke removed
        # a deleted entry's view reaches some of its watchers (those in its process)
        self.deleted_views = deleted_views
        # a mutation: the view of the entry admitted before it (a key naming two entries)
        self.older_views = older_views
        self.admitted_views: dict[str, tuple[Entry, ...]] = {}  # key -> view when admitted
        self.next_order = 0
        self.clients = [
            Client(
                cid=i,
                weights=dict(weights[i]) if weights else self._random_weights(max_weight),
                timeout=timeouts and rng.random() < 0.2,
            )
            for i in range(len(weights) if weights else clients)
        ]
        self.max_woken = 0
        self.admissions = 0
        self.admissions_told = 0  # server admission: StoreAdmitted events sent
        self.max_held = 0
        self.slots = slots
        self.slot_records_die_later = slot_records_die_later
        # queue -> index -> (entry key, token): the slot records
        self.slot_records: dict[str, dict[int, tuple[str, int]]] = {n: {} for n in self.names}
        self.orphan_slots: list[tuple[str, int]] = []  # (queue, index) still to delete
        self.slots_granted = 0
        self.stale_slot_listing = stale_slot_listing
        self.first_slot_listing: dict[int, frozenset[int]] = {}  # cid -> its ListSlots answer

    def _random_weights(self, max_weight: int) -> dict[str, int]:
        if len(self.names) == 1:
            name = self.names[0]
            return {name: self.rng.randint(1, min(max_weight, self.capacities[name]))}
        chosen = self.rng.sample(self.names, self.rng.randint(1, len(self.names)))
        return {n: self.rng.randint(1, min(max_weight, self.capacities[n])) for n in chosen}

    # the one queue of a single-semaphore run, as the older tests address it
    @property
    def capacity(self) -> int:
        return self.capacities[self.names[0]]

    @capacity.setter
    def capacity(self, value: int) -> None:
        self.capacities[self.names[0]] = value

    # ---- store operations ------------------------------------------------------
    def _fire(self, key: str, event: Event) -> None:
        """Deliver ``event`` to the watchers of ``key``: one-shot watches, spent."""
        self._tell(key, event)
        self.watches.pop(key, None)

    def _tell(self, key: str, event: Event) -> None:
        """Deliver ``event`` to the watchers of ``key``, whose watches stay armed."""
        woken = 0
        queue = key.split("/", 1)[0]
        for cid in self.watches.get(key, set()):
            c = self.clients[cid]
            if c.state == "waiting":
                c.events.append(QueueEvent(queue, event) if c.multi else event)
                woken += 1
        self.max_woken = max(self.max_woken, woken)

    def _delete(self, keys: Mapping[str, str]) -> None:
        """Delete a client's entries, and their slot records, in one request."""
        for queue, key in list(keys.items()):
            records = self.slot_records[queue]
            for index in [i for i, (holder, _) in records.items() if holder == key]:
                if self.slot_records_die_later:
                    self.orphan_slots.append((queue, index))
                else:
                    del records[index]
            if key in self.store:
                self.gone.append((self.store.pop(key), self.next_order))
                self._fire(key, EntryDeleted(key, self._known_view(key)))
        for queue in keys:
            self._sweep(queue)

    def _sweep(self, queue: str, quiet: frozenset[str] = frozenset()) -> None:
        """A store that decides admission, after a change of ``queue``: from the head,
        every waiter that fits by the prefix rule is admitted (held) and its client told
        StoreAdmitted, but those of ``quiet`` (the creator: its create's answer says it);
        the first waiter that does not fit stops it."""
        if not self.server_admission or self.draining[queue]:
            return
        total = told = 0
        for e in sorted((e for e in self.store.values() if e.queue == queue), key=_order):
            if e.held:
                total += 0 if self.store_mutation == "forget_holders" else e.weight
                continue
            if total + e.weight > self.capacities[queue]:
                break
            e.held = True
            total += e.weight
            if self.admission_slots and e.wants_slots:
                e.slots = self._give_slots(queue, e)
            if e.key in quiet or self.store_mutation == "untold":
                continue
            for c in self.clients:
                if c.state == "waiting" and c.keys.get(queue) == e.key:
                    event = StoreAdmitted(e.key, e.slots)
                    c.events.append(QueueEvent(queue, event) if c.multi else event)
                    told += 1
        self.max_woken = max(self.max_woken, told)
        self.admissions_told += told

    def _give_slots(self, queue: str, e: StoredEntry) -> tuple[Slot, ...]:
        """admission_slots: the admitted ``e`` gets its weight's lowest indices that no
        record has (every record is a live holder's), a record and a token each, in
        the admitting write."""
        records = self.slot_records[queue]
        taken = () if self.store_mutation == "slots_ignore_holders" else records
        given = []
        for index in lowest_free(taken, e.weight):
            token = self.next_order  # from the store's counter
            self.next_order += 1
            records[index] = (e.key, token)
            given.append(Slot(index, token))
        return tuple(given)

    def _known_view(self, key: str) -> tuple[Entry, ...] | None:
        """The view ``key`` was admitted with, when the waiter told of its deletion
        shares its process (at random)."""
        if not self.deleted_views or self.rng.random() < 0.5:
            return None
        if self.older_views:
            queue, order = _queue_and_order(key)
            older = [
                k
                for k in self.admitted_views
                if _queue_and_order(k)[0] == queue and _queue_and_order(k)[1] < order
            ]
            newest = max(older, key=lambda k: _queue_and_order(k)[1]) if older else None
            return None if newest is None else self.admitted_views[newest]
        return self.admitted_views.get(key)

    def _relisted(self, me: StoredEntry) -> list[StoredEntry]:
        """A Relist's answer (see ``relists``)."""
        lower = self._lower(me)
        if self.relists == "superset":
            # deleted after our create (a record holding our entry was listed after it)
            lower += [
                e
                for e, deleted_at in self.gone
                if e.queue == me.queue
                and e.order < me.order < deleted_at
                and self.rng.random() < 0.5
            ]
        elif self.relists == "missing" and lower and self.rng.random() < 0.5:
            lower.pop(self.rng.randrange(len(lower)))
        return sorted(lower, key=lambda e: e.order)

    def _lower(self, me: StoredEntry) -> list[StoredEntry]:
        return sorted(
            (e for e in self.store.values() if e.queue == me.queue and e.order < me.order),
            key=lambda e: e.order,
        )

    # ---- driving one client's generator ------------------------------------------
    def _send(self, c: Client, answer: object) -> None:
        assert c.gen is not None
        try:
            c.step = c.gen.send(answer)
        except StopIteration as stop:
            entries = stop.value if c.multi else {next(iter(c.weights)): stop.value}
            assert {q: e.key for q, e in entries.items()} == c.keys
            self._granted(c)
            return
        except (AcquireTimeout, Draining) as exc:
            self.refused += isinstance(exc, Draining)
            self._delete(c.keys)  # the driver's cleanup: every entry, one request
            self._forget(c)
            return
        self._prepare(c)

    def _forget(self, c: Client) -> None:
        c.state, c.gen, c.step, c.keys = "done", None, None, {}
        c.slots = ()
        c.admitted.clear()
        c.mark_pending.clear()
        c.unmarked.clear()
        c.events.clear()

    def _prepare(self, c: Client) -> None:
        step = c.step
        queue = c.step_queue = next(iter(c.weights))
        if isinstance(step, InQueue):
            queue, step = step.name, step.step
            c.step_queue = queue
        if isinstance(step, (Enqueue, EnqueueAll)):
            # a new generation: what was posted for an earlier entry is dropped; what is
            # posted from now on (a capacity the process applies while we enqueue, which
            # may be older than the one the listing brings) is kept
            c.created, c.keys, c.create_admitted, c.create_slots = False, {}, {}, {}
            c.admitted.clear()
            c.mark_pending.clear()
            c.unmarked.clear()
            c.events = deque(e for e in c.events if isinstance(e, SessionLost))
        elif isinstance(step, (Arm, Peek, Relist)) and self.server_admission:
            raise AssertionError(f"client {c.cid}: {step} where the store decides admission")
        elif isinstance(step, (ListSlots, TakeSlot)) and self.admission_slots:
            raise AssertionError(f"client {c.cid}: {step} where the admission gives the slots")
        elif isinstance(step, (Arm, Peek)):
            c.to_arm, c.arm_results = list(step.keys), {}
            c.watching = isinstance(step, Arm)
            c.peeks += not c.watching
        elif isinstance(step, MarkHeld) and self.server_admission:
            self._admitted_in(c, queue)  # (the store's write marked it)
            self._check_slots(c, queue, step.slots)
            self._send(c, None)
        elif isinstance(step, MarkHeld):
            self._admitted_in(c, queue)
            self._check_slots(c, queue, step.slots)
            if step.view is not None:
                self.admitted_views[c.keys[queue]] = step.view
            lower = step.lower if self.record_lower else None
            c.unmarked.pop(queue, None)
            if self.mark_held and step.now:
                c.mark_pending[queue] = lower
            elif self.mark_held:
                c.unmarked[queue] = lower
            self._send(c, None)

    def _admitted_in(self, c: Client, queue: str) -> None:
        """``c`` takes itself for admitted in ``queue``: check the prefix rule there."""
        me = self.store[c.keys[queue]]
        if self.server_admission and not me.held:
            raise OverAdmission(f"client {c.cid} admitted in {queue}, not by the store")
        prefix = sum(e.weight for e in self._lower(me)) + me.weight
        if prefix > c.capacity_bound[queue]:
            raise OverAdmission(
                f"client {c.cid} admitted in {queue} with prefix {prefix} > "
                f"{c.capacity_bound[queue]} (the largest capacity stored since its entry "
                f"was created)"
            )
        c.admitted.add(queue)
        held = sum(x.weights[queue] for x in self.clients if queue in x.admitted)
        if queue == self.names[0]:
            self.max_held = max(self.max_held, held)
        if queue not in self.decreased and held > self.capacities[queue]:
            raise OverAdmission(f"{queue}: admitted {held} > capacity {self.capacities[queue]}")

    def _check_slots(self, c: Client, queue: str, slots: tuple[Slot, ...]) -> None:
        """``c`` is granted ``slots`` in ``queue``: each one its own record, none
        another holder's, each below the capacity it was granted under."""
        if not self.slots or c.multi:
            assert not slots
            return
        me = c.weights[queue]
        if len(slots) != me or len({s.index for s in slots}) != me:
            raise SlotViolation(f"client {c.cid} (w={me}) granted slots {slots}")
        records = self.slot_records[queue]
        for slot in slots:
            if records.get(slot.index) != (c.keys[queue], slot.token):
                raise SlotViolation(f"client {c.cid}: slot {slot} is not its record")
        held = [s.index for x in self.clients if x.state == "holding" for s in x.slots]
        clash = set(held) & {s.index for s in slots}
        if clash:
            raise SlotViolation(f"client {c.cid} granted slots {sorted(clash)} held by others")
        bound = max(
            x.capacity_bound[queue]
            for x in self.clients
            if queue in x.admitted and queue in x.capacity_bound
        )
        if queue not in self.decreased:
            bound = min(bound, self.capacities[queue])  # no decrease: within the capacity
        if max(s.index for s in slots) >= bound:
            raise SlotViolation(
                f"client {c.cid} (w={me}) granted slots {[s.index for s in slots]}, "
                f"capacity {self.capacities[queue]}, bound {bound}; records: {records}"
            )
        c.slots = slots
        self.slots_granted += len(slots)

    def _granted(self, c: Client) -> None:
        assert c.admitted == set(c.weights), (c.cid, c.admitted)
        c.state, c.gen, c.step = "holding", None, None
        self.admissions += 1

    # ---- the scheduler ---------------------------------------------------------
    def internal_actions(self) -> list[tuple[str, Client]]:
        acts: list[tuple[str, Client]] = []
        for c in self.clients:
            if c.mark_pending:
                acts.append(("mark", c))
            if c.state != "waiting":
                continue
            step = c.step.step if isinstance(c.step, InQueue) else c.step
            if isinstance(step, (Enqueue, EnqueueAll)):
                acts.append(("list" if c.created else "create", c))
            elif isinstance(step, (Arm, Peek)):
                acts.append(("arm", c))
            elif isinstance(step, Relist):
                acts.append(("relist", c))
            elif isinstance(step, ListSlots):
                acts.append(("list_slots", c))
            elif isinstance(step, TakeSlot):
                acts.append(("take_slot", c))
            elif isinstance(step, AwaitEvent) and c.events:
                acts.append(("deliver", c))
        return acts

    def external_actions(self) -> list[tuple[str, Client | None]]:
        acts: list[tuple[str, Client | None]] = []
        for c in self.clients:
            if c.state == "new":
                acts.append(("start", c))
            elif c.state == "holding":
                acts.extend([("release", c)] * 3 + [("crash", c)])
                if self.revokes:
                    acts.extend([("revoke", c), ("ask", c), ("ask", c)])
            elif c.state == "revoked":  # its lost fired: it releases, nothing is left
                acts.append(("release", c))
            elif c.state == "waiting" and isinstance(c.step, AwaitEvent) and not c.events:
                if self.revokes and self.rng.random() < 0.3:
                    acts.append(("ask", c))
                if c.timeout:
                    acts.append(("timeout", c))
                acts.append(("expire", c))
                if self.rng.random() < 0.1:
                    acts.append(("crash", c))
            elif c.state == "waiting" and isinstance(c.step, (ListSlots, TakeSlot)):
                if self.rng.random() < 0.1:
                    acts.append(("expire", c))
                if self.rng.random() < 0.05:
                    acts.append(("crash", c))
        if self.capacity_changes and self.rng.random() < 0.15:
            acts.append(("capacity", None))
        if self.drains and self.rng.random() < 0.1:
            acts.append(("drain", None))
        if self.orphan_slots:
            acts.append(("drop_orphan_slots", None))
        return acts

    def _change_capacity(self) -> None:
        queue = self.names[0] if len(self.names) == 1 else self.rng.choice(self.names)
        self.set_capacity(queue, self.rng.randint(1, 4))

    def set_draining(self, queue: str, draining: bool) -> None:
        """Set or clear the drain flag: a new version of the config, told as a capacity
        change is."""
        self.draining[queue] = draining
        self.set_capacity(queue, self.capacities[queue])

    def set_capacity(self, queue: str, new: int) -> None:
        """Store a new capacity: holders mark themselves if it dropped, waiters are told."""
        if new < self.capacities[queue]:
            self.decreased.add(queue)
            for x in self.clients:  # each holder's process sees the drop, marks itself
                if x.state == "holding" and queue in x.unmarked:
                    x.mark_pending[queue] = x.unmarked.pop(queue)
        self.capacities[queue] = new
        self.capacity_versions[queue] += 1
        event = CapacityChanged(new, self.capacity_versions[queue], self.draining[queue])
        for x in self.clients:
            if queue in x.keys:
                x.capacity_bound[queue] = max(x.capacity_bound[queue], new)
            if x.state == "waiting" and queue in x.weights:
                post: Event | QueueEvent = QueueEvent(queue, event) if x.multi else event
                # A driver posts a capacity it applied after releasing its lock, so
                # two posts may land in either order (stale_capacity_events).
                older = [
                    i
                    for i, e in enumerate(x.events)
                    if isinstance(e.event if isinstance(e, QueueEvent) else e, CapacityChanged)
                    and (not isinstance(e, QueueEvent) or e.name == queue)
                ]
                if self.stale_capacity_events and older and self.rng.random() < 0.5:
                    x.events.insert(older[-1], post)
                else:
                    x.events.append(post)
        self._sweep(queue)

    def _create(self, c: Client) -> None:
        """The atomic create: every entry of the request, one order. The mutation
        creates one entry per action, each with an order of its own."""
        missing = [q for q in c.weights if q not in c.keys]
        if not self.atomic_create:
            missing = [self.rng.choice(missing)]
        order = self.next_order
        self.next_order += 1
        for queue in missing:
            key = f"{queue}/k{order}"
            c.keys[queue] = key
            c.capacity_bound[queue] = self.capacities[queue]
            wants = self.admission_slots and not c.multi
            self.store[key] = StoredEntry(queue, key, order, c.weights[queue], wants_slots=wants)
        for queue in missing:  # the answer is the create's, taken with it
            if c.multi or not self._behind_a_waiter(self.store[c.keys[queue]]):
                self._sweep(queue, quiet=frozenset(c.keys.values()))
            c.create_admitted[queue] = self.store[c.keys[queue]].held
            c.create_slots[queue] = self.store[c.keys[queue]].slots
        c.created = len(c.keys) == len(c.weights)

    def _behind_a_waiter(self, me: StoredEntry) -> bool:
        """Redis's single enqueue sweeps only when its nearest lower entry holds or
        there is none: behind a waiter the sweep would stop before reaching it."""
        lower = [e for e in self.store.values() if e.queue == me.queue and e.order < me.order]
        return bool(lower) and not max(lower, key=_order).held

    def _listing(self, c: Client, queue: str) -> Enqueued:
        me = self.store[c.keys[queue]]
        lower = tuple(Entry(e.key, e.order, e.weight) for e in self._lower(me))  # names only
        capacity = self.capacities[queue]
        # a store may list only the nearest capacity + 1 lower entries (etcd, memory)
        nearest = core_queue.nearest_needed(capacity)
        complete = len(lower) <= nearest or self.rng.random() < 0.5
        if not complete:
            lower = lower[-nearest:]
        later = any(e.queue == queue and e.order > me.order for e in self.store.values())
        admitted = self.server_admission and c.create_admitted[queue]
        return Enqueued(
            Entry(me.key, me.order, me.weight),
            () if admitted else lower,
            capacity,
            later,
            capacity_version=self.capacity_versions[queue],
            lower_complete=complete,
            admitted=admitted,
            slots=c.create_slots[queue] if admitted else None,
            draining=self.draining[queue],
        )

    def _slot_answer_lost(self, c: Client) -> bool:
        """A slot step of ``c`` whose entry is gone (its session ended): answered
        SessionLost, as a driver does (the inbox's SessionLost is that same news)."""
        if c.keys.get(c.step_queue) in self.store:
            return False
        c.events = deque(e for e in c.events if not isinstance(e, SessionLost))
        self._send(c, SessionLost())
        return True

    def do(self, action: str, c: Client | None) -> None:
        if action == "capacity":
            self._change_capacity()
            return
        if action == "drain":
            queue = self.rng.choice(self.names)
            self.set_draining(queue, not self.draining[queue])
            return
        if action == "drop_orphan_slots":
            for queue, index in self.orphan_slots:
                self.slot_records[queue].pop(index, None)
            self.orphan_slots.clear()
            return
        assert c is not None
        if action == "start":
            c.state = "waiting"
            client = c
            deadline = Deadline(1.0 if c.timeout else None, clock=lambda: client.clock)
            decides = self.server_admission
            if c.multi:
                c.gen = multi_acquire_protocol(c.weights, deadline, server_admission=decides)
            else:
                ((name, weight),) = c.weights.items()
                c.gen = acquire_protocol(
                    name,
                    weight,
                    deadline,
                    slots=self.slots,
                    server_admission=decides,
                    peek_first=self.peeks,
                )
            c.step = next(c.gen)
            self._prepare(c)
        elif action == "create":
            self._create(c)
        elif action == "list":
            if not self.stale_capacity_events:
                c.events.clear()
            answers = {queue: self._listing(c, queue) for queue in c.weights}
            self._send(c, EnqueuedAll(answers) if c.multi else answers[c.step_queue])
        elif action == "arm":
            key = c.to_arm.pop(self.rng.randrange(len(c.to_arm)))
            stored = self.store.get(key)
            if stored is None:
                # a read of a missing node sets no watch
                view = self._known_view(key)
                gone = None if view is None else EntryState(held=True, left_view=view)
                c.arm_results[key] = gone
            else:
                if c.watching:
                    self.watches.setdefault(key, set()).add(c.cid)
                c.arm_results[key] = EntryState(stored.held, stored.lower if stored.held else None)
            if not c.to_arm:
                self._send(c, dict(c.arm_results))
        elif action == "relist":
            me = self.store[c.keys[c.step_queue]]
            c.relists += 1
            self._send(c, [Entry(e.key, e.order, e.weight) for e in self._relisted(me)])
        elif action == "deliver":
            self._send(c, c.events.popleft())
        elif action == "list_slots":
            if not self._slot_answer_lost(c):
                records = self.slot_records[c.step_queue]
                listing = frozenset(records)
                self.first_slot_listing[c.cid] = listing
                self._send(c, listing)
        elif action == "take_slot":
            assert isinstance(c.step, TakeSlot)
            if not self._slot_answer_lost(c):
                records = self.slot_records[c.step_queue]
                if c.step.index in records:  # another holder won it: who holds what now
                    fresh = frozenset(records)
                    if self.stale_slot_listing:
                        fresh = self.first_slot_listing[c.cid] | {c.step.index}
                    self._send(c, fresh)
                else:
                    token = self.next_order  # the record's token: a store revision
                    self.next_order += 1
                    records[c.step.index] = (c.keys[c.step_queue], token)
                    self._send(c, token)
        elif action == "mark":
            pending = sorted(c.mark_pending)
            queue = pending[0] if len(pending) == 1 else self.rng.choice(pending)
            lower = c.mark_pending.pop(queue)
            marked = c.keys.get(queue)
            if marked is not None and marked in self.store and not self.store[marked].held:
                self.store[marked].held = True
                self.store[marked].lower = lower
                if self.persistent_watches:
                    self._tell(marked, EntryMarked(marked, lower))
                else:
                    self._fire(marked, EntryHeld(marked))
        elif action == "release" or action == "crash":
            self._delete(c.keys)
            self._forget(c)
        elif action == "ask":
            # a revoke request written on each of its entries: nothing the protocol
            # reads changes, but the watchers see a write
            for key in c.keys.values():
                if self.server_admission or key not in self.store:
                    continue
                entry = self.store[key]
                if not self.persistent_watches:
                    self._fire(key, EntryHeld(key))
                elif entry.held:
                    self._tell(key, EntryMarked(key, entry.lower))
                else:
                    self._fire(key, EntryChanged(key))
        elif action == "revoke":
            # the operator's token-checked removal; the holder goes on until it sees it
            self._delete(c.keys)
            self.revoked += 1
            c.state, c.keys = "revoked", {}
            c.admitted.clear()  # no longer counted: its fenced writes fail
            c.mark_pending.clear()
            c.unmarked.clear()
        elif action == "timeout":
            c.clock = math.inf
            self._send(c, None)
        elif action == "expire":
            self._delete(c.keys)
            for watchers in self.watches.values():
                watchers.discard(c.cid)
            c.events.clear()
            c.events.append(SessionLost())
            c.keys = {}
            c.admitted.clear()
            c.mark_pending.clear()
            c.unmarked.clear()

    def check_quiescent(self) -> None:
        """Nothing is in flight: no waiter may be admissible in a queue that has not
        admitted it yet."""
        for c in self.clients:
            if c.state != "waiting" or not c.keys:
                continue
            for queue, key in c.keys.items():
                if queue in c.admitted:
                    continue
                me = self.store[key]
                lower = [Entry(e.key, e.order, e.weight, e.held) for e in self._lower(me)]
                truth = core_queue.decide(lower, me.weight, self.capacities[queue])
                if isinstance(truth, core_queue.Admitted):
                    raise LostWakeup(
                        f"client {c.cid} (w={me.weight}) sleeps though admissible in "
                        f"{queue}: lower={[(e.key, e.weight, e.held) for e in lower]} "
                        f"capacity={self.capacities[queue]}"
                    )

    def check_drained(self) -> None:
        """Nothing is in flight: nobody waits in a draining queue (each was refused
        or told, and left)."""
        for c in self.clients:
            if c.state != "waiting" or not c.keys:
                continue
            stuck = [q for q in c.keys if self.draining[q] and q not in c.admitted]
            if stuck:
                raise LostWakeup(f"client {c.cid} waits in draining {stuck}")

    def check_deadlock(self) -> None:
        """Nothing is in flight, nobody holds a permit and every waiter's weights fit
        its queues' capacities (one that does not rightly waits for an increase, and
        holds back those behind it): the waiters wait for each other. (With one atomic
        create per request the earliest waiter has nothing before it in any queue, so
        check_quiescent finds it admissible first.)"""
        if any(c.state == "holding" for c in self.clients):
            return
        stuck = [c for c in self.clients if c.state == "waiting" and c.keys and not c.events]
        if any(w > self.capacities[q] for c in stuck for q, w in c.weights.items()):
            return
        if stuck:
            raise Deadlock(
                f"clients {[(c.cid, c.weights, sorted(c.admitted)) for c in stuck]} "
                f"wait with no holder"
            )

    def drain(self) -> None:
        while acts := self.internal_actions():
            self.do(*self.rng.choice(acts))
        self.check_quiescent()

    def run(self, max_steps: int = 400) -> None:
        for _ in range(max_steps):
            internal = self.internal_actions()
            external = self.external_actions()
            if not internal and not external:
                break
            if not internal:
                self.check_quiescent()
                self.check_drained()
                self.check_deadlock()
            pool: list[tuple[str, Client | None]] = [*internal, *internal, *external]
            self.do(*self.rng.choice(pool))
        # Wind down: let holders leave one by one; every waiter must get its turn.
        self.capacity_changes = self.drains = False
        for queue in [q for q, draining in self.draining.items() if draining]:
            self.set_draining(queue, False)
        self.drain()
        while True:
            holders = [c for c in self.clients if c.state in ("holding", "revoked")]
            waiting = [c for c in self.clients if c.state == "waiting"]
            new = [c for c in self.clients if c.state == "new"]
            if new:
                self.do("start", new[0])
            elif holders:
                self.do("release", self.rng.choice(holders))
            elif waiting:
                raise Deadlock(
                    f"clients {[(c.cid, c.weights, sorted(c.admitted)) for c in waiting]} "
                    f"wait with no holder left"
                )
            else:
                break
            self.drain()
        assert not self.store, f"entries left behind: {sorted(self.store)}"
        for queue, index in self.orphan_slots:
            self.slot_records[queue].pop(index, None)
        left = {q: r for q, r in self.slot_records.items() if r}
        assert not left, f"slot records left behind: {left}"


def _order(entry: StoredEntry) -> int:
    return entry.order


def _queue_and_order(key: str) -> tuple[str, int]:
    """A simulated entry key ``<queue>/k<order>``: its queue and its order."""
    queue, _, order = key.rpartition("/k")
    return queue, int(order)
