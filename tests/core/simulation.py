"""An in-memory model of the store for checking the queue protocol.

The store orders entries, keeps one-shot watches, and delivers events to clients in
order. Each simulated client runs the real :func:`acquire_protocol` generator; the
scheduler interleaves every store operation (create, listing, each watch read, each
held mark, deletions, crashes, session losses, timeouts, capacity changes) at random.
Checks: admissions respect the prefix rule (and, with no capacity decrease, the sum
held never exceeds capacity), no waiter sleeps while it could be admitted, and no
store event wakes more than a bounded number of waiters.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field

from semaphore_recipes._core import queue as core_queue
from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import (
    Arm,
    AwaitEvent,
    CapacityChanged,
    Enqueue,
    Enqueued,
    EntryDeleted,
    EntryHeld,
    EntryMarked,
    Event,
    MarkHeld,
    Relist,
    SessionLost,
    Step,
    acquire_protocol,
)
from semaphore_recipes._core.queue import Entry, EntryState
from semaphore_recipes.errors import AcquireTimeout


class LostWakeup(AssertionError):
    pass


class OverAdmission(AssertionError):
    pass


@dataclass
class StoredEntry:
    key: str
    order: int
    weight: int
    held: bool = False
    lower: tuple[str, ...] | None = None  # what the held mark records


@dataclass
class Client:
    cid: int
    weight: int
    timeout: bool
    gen: Generator[Step, object, Entry] | None = None
    step: Step | None = None
    state: str = "new"  # new | waiting | holding | done
    key: str | None = None
    created: bool = False  # the create happened; the listing is still to come
    to_arm: list[str] = field(default_factory=list)
    arm_results: dict[str, EntryState | None] = field(default_factory=dict)
    events: deque[Event] = field(default_factory=deque)
    clock: float = 0.0
    known_capacity: int = 0
    #: the largest capacity stored since the entry was created: what may admit it
    capacity_bound: int = 0
    mark_pending: bool = False
    unmarked: bool = False  # admitted without a mark: marked if the capacity drops
    mark_lower: tuple[str, ...] | None = None
    relists: int = 0


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
    ) -> None:
        self.rng = rng
        self.store: dict[str, StoredEntry] = {}
        self.watches: dict[str, set[int]] = {}
        self.capacity = capacity
        self.capacity_changes = capacity_changes
        self.decreased = False
        self.mark_held = mark_held
        self.record_lower = record_lower
        # etcd-like: a watch outlives a held mark, whose event carries the mark
        self.persistent_watches = persistent_watches
        # capacity events posted during an enqueue stay in the inbox (as a driver's do),
        # and two of them may arrive in the other order
        self.stale_capacity_events = stale_capacity_events
        self.capacity_version = 0
        self.next_order = 0
        self.clients = [
            Client(
                cid=i, weight=rng.randint(1, min(max_weight, capacity)), timeout=rng.random() < 0.2
            )
            for i in range(clients)
        ]
        self.max_woken = 0
        self.admissions = 0
        self.max_held = 0

    # ---- store operations ------------------------------------------------------
    def _fire(self, key: str, event: Event) -> None:
        """Deliver ``event`` to the watchers of ``key``: one-shot watches, spent."""
        self._tell(key, event)
        self.watches.pop(key, None)

    def _tell(self, key: str, event: Event) -> None:
        """Deliver ``event`` to the watchers of ``key``, whose watches stay armed."""
        woken = 0
        for cid in self.watches.get(key, set()):
            c = self.clients[cid]
            if c.state == "waiting":
                c.events.append(event)
                woken += 1
        self.max_woken = max(self.max_woken, woken)

    def _delete(self, key: str | None) -> None:
        if key is not None and key in self.store:
            del self.store[key]
            self._fire(key, EntryDeleted(key))

    def _lower(self, me: StoredEntry) -> list[StoredEntry]:
        return sorted((e for e in self.store.values() if e.order < me.order), key=lambda e: e.order)

    # ---- driving one client's generator ------------------------------------------
    def _send(self, c: Client, answer: object) -> None:
        assert c.gen is not None
        try:
            c.step = c.gen.send(answer)
        except StopIteration as stop:
            entry = stop.value
            assert entry.key == c.key
            self._admitted(c)
            return
        except AcquireTimeout:
            self._delete(c.key)  # the driver's cleanup
            c.state, c.gen, c.step, c.key = "done", None, None, None
            return
        self._prepare(c)

    def _prepare(self, c: Client) -> None:
        step = c.step
        if isinstance(step, Enqueue):
            # a new generation: what was posted for an earlier entry is dropped; what is
            # posted from now on (a capacity the process applies while we enqueue, which
            # may be older than the one the listing brings) is kept
            c.created, c.key = False, None
            c.events = deque(e for e in c.events if isinstance(e, SessionLost))
        elif isinstance(step, Arm):
            c.to_arm, c.arm_results = list(step.keys), {}
        elif isinstance(step, MarkHeld):
            c.mark_pending = self.mark_held and step.now
            c.unmarked = self.mark_held and not step.now
            c.mark_lower = step.lower if self.record_lower else None
            self._send(c, None)

    def _admitted(self, c: Client) -> None:
        me = self.store[c.key] if c.key else None
        assert me is not None
        prefix = sum(e.weight for e in self._lower(me)) + me.weight
        if prefix > c.capacity_bound:
            raise OverAdmission(
                f"client {c.cid} admitted with prefix {prefix} > {c.capacity_bound} (the "
                f"largest capacity stored since its entry was created; it knew "
                f"{c.known_capacity})"
            )
        c.state, c.gen, c.step = "holding", None, None
        self.admissions += 1
        held = sum(self.store[x.key].weight for x in self.clients if x.state == "holding" and x.key)
        self.max_held = max(self.max_held, held)
        if not self.decreased and held > self.capacity:
            raise OverAdmission(f"held {held} > capacity {self.capacity}")

    # ---- the scheduler ---------------------------------------------------------
    def internal_actions(self) -> list[tuple[str, Client]]:
        acts: list[tuple[str, Client]] = []
        for c in self.clients:
            if c.mark_pending:
                acts.append(("mark", c))
            if c.state != "waiting":
                continue
            if isinstance(c.step, Enqueue):
                acts.append(("list" if c.created else "create", c))
            elif isinstance(c.step, Arm):
                acts.append(("arm", c))
            elif isinstance(c.step, Relist):
                acts.append(("relist", c))
            elif isinstance(c.step, AwaitEvent) and c.events:
                acts.append(("deliver", c))
        return acts

    def external_actions(self) -> list[tuple[str, Client | None]]:
        acts: list[tuple[str, Client | None]] = []
        for c in self.clients:
            if c.state == "new":
                acts.append(("start", c))
            elif c.state == "holding":
                acts.extend([("release", c)] * 3 + [("crash", c)])
            elif c.state == "waiting" and isinstance(c.step, AwaitEvent) and not c.events:
                if c.timeout:
                    acts.append(("timeout", c))
                acts.append(("expire", c))
                if self.rng.random() < 0.1:
                    acts.append(("crash", c))
        if self.capacity_changes and self.rng.random() < 0.15:
            acts.append(("capacity", None))
        return acts

    def do(self, action: str, c: Client | None) -> None:
        if action == "capacity":
            new = self.rng.randint(1, 4)
            if new < self.capacity:
                self.decreased = True
                for x in self.clients:  # each holder's process sees the drop, marks itself
                    if x.state == "holding" and x.unmarked:
                        x.unmarked, x.mark_pending = False, True
            self.capacity = new
            self.capacity_version += 1
            event = CapacityChanged(new, self.capacity_version)
            for x in self.clients:
                if x.key is not None:
                    x.capacity_bound = max(x.capacity_bound, new)
                if x.state == "waiting":
                    # A driver posts a capacity it applied after releasing its lock, so
                    # two posts may land in either order (stale_capacity_events).
                    older = [i for i, e in enumerate(x.events) if isinstance(e, CapacityChanged)]
                    if self.stale_capacity_events and older and self.rng.random() < 0.5:
                        x.events.insert(older[-1], event)
                    else:
                        x.events.append(event)
            return
        assert c is not None
        if action == "start":
            c.state = "waiting"
            client = c
            deadline = Deadline(1.0 if c.timeout else None, clock=lambda: client.clock)
            c.gen = acquire_protocol("sim", c.weight, deadline)
            c.step = next(c.gen)
            self._prepare(c)
        elif action == "create":
            c.key = f"k{self.next_order}"
            c.capacity_bound = self.capacity
            self.store[c.key] = StoredEntry(c.key, self.next_order, c.weight)
            self.next_order += 1
            c.created = True
        elif action == "list":
            assert c.key is not None
            me = self.store[c.key]
            lower = tuple(Entry(e.key, e.order, e.weight) for e in self._lower(me))  # names only
            # a store may list only the nearest capacity + 1 lower entries (etcd, memory)
            nearest = self.capacity + 1
            complete = len(lower) <= nearest or self.rng.random() < 0.5
            if not complete:
                lower = lower[-nearest:]
            later = any(e.order > me.order for e in self.store.values())
            c.known_capacity = self.capacity
            if not self.stale_capacity_events:
                c.events.clear()
            answer = Enqueued(
                Entry(me.key, me.order, me.weight),
                lower,
                self.capacity,
                later,
                capacity_version=self.capacity_version,
                lower_complete=complete,
            )
            self._send(c, answer)
        elif action == "arm":
            key = c.to_arm.pop(self.rng.randrange(len(c.to_arm)))
            stored = self.store.get(key)
            if stored is None:
                c.arm_results[key] = None  # a read of a missing node sets no watch
            else:
                self.watches.setdefault(key, set()).add(c.cid)
                c.arm_results[key] = EntryState(stored.held, stored.lower if stored.held else None)
            if not c.to_arm:
                self._send(c, dict(c.arm_results))
        elif action == "relist":
            assert c.key is not None
            me = self.store[c.key]
            c.relists += 1
            self._send(c, [Entry(e.key, e.order, e.weight) for e in self._lower(me)])
        elif action == "deliver":
            delivered = c.events.popleft()
            if isinstance(delivered, CapacityChanged):
                c.known_capacity = delivered.capacity
            self._send(c, delivered)
        elif action == "mark":
            c.mark_pending = False
            if c.key in self.store and not self.store[c.key].held:
                self.store[c.key].held = True
                self.store[c.key].lower = c.mark_lower
                if self.persistent_watches:
                    self._tell(c.key, EntryMarked(c.key, c.mark_lower))
                else:
                    self._fire(c.key, EntryHeld(c.key))
        elif action == "release" or action == "crash":
            self._delete(c.key)
            c.state, c.gen, c.step, c.key = "done", None, None, None
            c.mark_pending = c.unmarked = False
            c.events.clear()
        elif action == "timeout":
            c.clock = math.inf
            self._send(c, None)
        elif action == "expire":
            self._delete(c.key)
            for watchers in self.watches.values():
                watchers.discard(c.cid)
            c.events.clear()
            c.events.append(SessionLost())
            c.key = None

    def check_quiescent(self) -> None:
        """Nothing is in flight: no waiter may be admissible."""
        for c in self.clients:
            if c.state != "waiting" or c.key is None:
                continue
            me = self.store[c.key]
            lower = [Entry(e.key, e.order, e.weight, e.held) for e in self._lower(me)]
            truth = core_queue.decide(lower, me.weight, self.capacity)
            if isinstance(truth, core_queue.Admitted):
                raise LostWakeup(
                    f"client {c.cid} (w={c.weight}) sleeps though admissible: "
                    f"lower={[(e.key, e.weight, e.held) for e in lower]} capacity={self.capacity}"
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
            pool: list[tuple[str, Client | None]] = [*internal, *internal, *external]
            self.do(*self.rng.choice(pool))
        # Wind down: let holders leave one by one; every waiter must get its turn.
        self.capacity_changes = False
        self.drain()
        while True:
            holders = [c for c in self.clients if c.state == "holding"]
            waiting = [c for c in self.clients if c.state == "waiting"]
            new = [c for c in self.clients if c.state == "new"]
            if new:
                self.do("start", new[0])
            elif holders:
                self.do("release", self.rng.choice(holders))
            elif waiting:
                raise LostWakeup(f"clients {[c.cid for c in waiting]} wait with no holder left")
            else:
                break
            self.drain()
        assert not self.store, f"entries left behind: {sorted(self.store)}"
