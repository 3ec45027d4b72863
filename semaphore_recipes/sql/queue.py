"""One semaphore's queue in a SQL database: each protocol step one call the server decides.

Admission is decided in the database (each dialect's schema), with the semaphore's row
locked: an enqueue that fits is admitted in its own round trip, and a release, an
abandoned entry or a capacity increase admits exactly the waiters that now fit and
tells each one's client (PostgreSQL: a notification; MySQL: a notice and a wake-up).
The store declares it (``server_admission``): the core protocol never arms, relists
nor writes a held mark here; what this driver tells it is the server's decision:

* the enqueue answers whether it was admitted (``Enqueued.admitted``; also when the
  notification overtook the reply);
* a later notification posts ``StoreAdmitted`` for the entry;
* a waiter that hears nothing looks again (``check``) when the first other live
  session would expire: a crashed holder is noticed within the session timeout and
  a little.

On connection loss a waiting entry looks once when the keeper listens again; when the
session expired, its entries are dead and the waiters enter the queue again with the
new session (``SQLBackend.session_ended``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._core.ramp import RampPlan
from ..backend import (
    Deadline,
    Enqueued,
    Entry,
    EntryStatus,
    FencedTransaction,
    Program,
    QueueDriver,
    RevocationWatches,
    SessionLost,
    Status,
    StoreAdmitted,
    Waiter,
    split_queue,
    validate_capacity,
)
from ..errors import CapacityMismatch, Draining, SemaphoreNotFound
from .requests import Soon, StepArg

if TYPE_CHECKING:
    from .store import SQLBackend

log = logging.getLogger("semaphore_recipes.sql")

#: a look after the session a waiter depends on would have expired comes this much later
CHECK_MARGIN = 0.05
#: what a heartbeat's look at a watched holder entry answers (``check_holders``)
HOLDER_GONE, HOLDER_THERE, HOLDER_ASKED = 0, 1, 2


def flag(value: object) -> bool:
    """A flag of a reply: JSON true or false, or (MySQL) the numbers 1 and 0, as text or not."""
    return value in (True, 1, "1", "t", "true")


@dataclass
class _Route:
    """A waiting entry of ours: where its admission goes, and whether it came (the
    notification may overtake the enqueue's reply)."""

    waiter: Waiter
    generation: int
    admitted: bool = False


@dataclass(frozen=True)
class EntryView:
    """A step's reply about one entry (``view`` in :mod:`.schema`)."""

    token: int
    held: bool
    capacity: int
    version: int
    check_in: float | None  # seconds; None: nothing to time
    watch: str | None = None  # (MySQL) the session of a holder whose end it may learn of

    @classmethod
    def parse(cls, reply: list[Any]) -> EntryView:
        _, token, held, capacity, version, check_in, *rest = reply
        return cls(
            token=int(token),
            held=flag(held),
            capacity=int(capacity),
            version=int(version),
            check_in=int(check_in) / 1000 if int(check_in) >= 0 else None,
            watch=str(rest[0]) if rest and rest[0] else None,
        )


class SQLQueue(QueueDriver):
    backend: SQLBackend

    def __init__(self, backend: SQLBackend, name: str) -> None:
        super().__init__(name, backend)
        self.where = f"semaphore {name!r} on {backend.describe()}"
        self._routes: dict[str, _Route] = {}
        self._holder_watches: dict[str, tuple[int, Callable[[str], None]]] = {}
        self._revocations = RevocationWatches()  # our holders told of revoke requests

    def _step(self, name: str, *args: StepArg, deadline: Deadline | None = None) -> Program[Any]:
        """Step ``name``, its reply parsed as JSON (None: NULL)."""
        reply = yield from self.backend.step(name, args, self.where, deadline=deadline)
        return None if reply is None else json.loads(reply)

    # ---- opening and capacity ----------------------------------------------------------
    def open(
        self, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[SQLQueue]:
        requested = capacity if create and capacity else None
        reply = yield from self._step("open_semaphore", self.name, requested)
        if reply is None:
            raise SemaphoreNotFound(self.name, self.backend.describe())
        stored, version = int(reply[0]), int(reply[1])
        self.apply_capacity(stored, version)
        if capacity is not None and stored != capacity and not adopt_capacity:
            raise CapacityMismatch(self.name, capacity, stored)
        return self

    def set_capacity(self, capacity: int) -> Program[None]:
        validate_capacity(capacity)  # (before any I/O: when the program is made)
        return self._setting_capacity(capacity)

    def _setting_capacity(self, capacity: int) -> Program[None]:
        version = yield from self._step("set_capacity", self.name, capacity)
        if version is None:
            raise SemaphoreNotFound(self.name, self.backend.describe())
        self.apply_capacity(capacity, int(version))

    def set_draining(self, draining: bool) -> Program[None]:
        reply = yield from self._step("set_draining", self.name, draining)
        if reply is None:
            raise SemaphoreNotFound(self.name, self.backend.describe())
        self.apply_capacity(int(reply[0]), int(reply[1]), draining)

    def write_ramp(self, capacity: int, ramp: RampPlan | None, version: int) -> Program[int | None]:
        validate_capacity(capacity)  # (before any I/O: when the program is made)
        return self._writing_ramp(capacity, "" if ramp is None else ramp.encode(), version)

    def _writing_ramp(self, capacity: int, plan: str, version: int) -> Program[int | None]:
        written = yield from self._step("ramp_step", self.name, capacity, version, plan)
        if written is None:
            raise SemaphoreNotFound(self.name, self.backend.describe())
        if not int(written):
            return None
        self.apply_capacity(capacity, int(written))
        return int(written)

    # ---- the protocol steps ------------------------------------------------------------
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        self.backend.check_open()  # (before an entry id is chosen: nothing to abandon)
        self.drop_route(waiter.entry_id)
        while True:
            session = self.backend.session
            entry_id = self.backend.new_entry_id()
            self.creating(waiter, entry_id)
            reply = yield from self._step(
                "enqueue", self.name, entry_id, session, waiter.owner, waiter.weight,
                deadline=deadline,
            )  # fmt: skip
            if reply[0] == "lost":  # our session expired: the keeper makes a new one
                self.drop_route(entry_id)
                yield from self.backend.await_new_session(session, deadline)
                continue
            if reply[0] == "gone":  # this id was abandoned meanwhile: a new one
                self.drop_route(entry_id)
                continue
            if reply[0] == "missing":
                self.drop_route(entry_id)
                raise SemaphoreNotFound(self.name, self.backend.describe())
            if reply[0] == "draining":  # (nothing was made)
                self.drop_route(entry_id)
                raise Draining(self.name)
            view = EntryView.parse(reply)
            waiter.created(entry_id, view.token)
            return self.enqueued(waiter, entry_id, view)

    def creating(self, waiter: Waiter, entry_id: str) -> None:
        """An enqueue attempt of ``waiter`` is about to create ``entry_id``: its
        admission, which may overtake the reply, is routed to it from now on."""
        generation = waiter.new_generation()
        with self._lock:
            self._routes[entry_id] = _Route(waiter, generation)
        waiter.creating(entry_id)  # before the create: an interrupted acquire finds it

    def enqueued(self, waiter: Waiter, entry_id: str, view: EntryView) -> Enqueued:
        """The Enqueue step's answer for our entry ``entry_id`` as ``view`` says."""
        with self._lock:
            route = self._routes.get(entry_id)
            admitted = view.held or (route is not None and route.admitted)
            if route is not None:
                route.admitted = admitted
        if not admitted:
            self.time_check(entry_id, view)
        # (a view, not a refusal: the semaphore did not drain as of that version)
        self.apply_capacity(view.capacity, view.version, False)
        capacity, version = self.capacity_answer()
        return Enqueued(
            me=Entry(key=entry_id, order=view.token, weight=waiter.weight),
            lower=(),
            capacity=capacity,
            later_entries=False,
            capacity_version=version,
            lower_complete=True,
            admitted=admitted,
        )

    def time_check(self, entry_id: str, view: EntryView) -> None:
        """A waiting entry's next look, and the holder whose end it may hear of sooner."""
        if view.check_in is not None:
            delay = view.check_in + CHECK_MARGIN
            self.backend.keeper.schedule(delay, lambda: self.check(entry_id))
        if view.watch is not None:
            self.backend.keeper.watch(view.watch)

    # ---- what the server tells us (the keeper's thread) -----------------------------------
    def admitted(self, entry_id: str, capacity: int, version: int) -> None:
        """The server admitted our entry ``entry_id`` under ``capacity``."""
        self.apply_capacity(capacity, version)
        with self._lock:
            route = self._routes.get(entry_id)
            if route is None or route.admitted:
                log.debug("%s: admitted %s: %s", self.where, entry_id,
                          "no route" if route is None else "already")  # fmt: skip
                return
            route.admitted = True
        log.debug("%s: admitted %s: posted for generation %d", self.where, entry_id,
                  route.generation)  # fmt: skip
        route.waiter.post(route.generation, StoreAdmitted(entry_id))

    # ---- revocation: a column of the entry, told on its client's channel --------------------
    def request_revoke(self, key: str, token: int) -> Program[bool]:
        return flag((yield from self._step("revoke", self.name, key, token, False)))

    def remove_revoked(self, key: str, token: int) -> Program[bool]:
        return flag((yield from self._step("revoke", self.name, key, token, True)))

    def watch_revocation(self, key: str, token: int, on_revoke: Callable[[], None]) -> None:
        self._revocations.watch(key, on_revoke)

    def revoke_requested(self, entry_id: str) -> None:
        """The notifier: a revoke request is on our entry ``entry_id``."""
        self._revocations.requested(entry_id, lambda: entry_id in self._routes)

    def deleted(self, entry_id: str) -> None:
        """Someone else removed our entry ``entry_id``."""
        with self._lock:
            watch = self._holder_watches.pop(entry_id, None)
        if watch is not None:
            watch[1]("the entry was deleted by another client")

    def check(self, entry_id: str) -> Program[None]:
        """A waiter's look: admits what fits (its own admission is in the reply),
        drops dead entries ahead, and times the next look."""
        with self._lock:
            route = self._routes.get(entry_id)
            if route is None or route.admitted:
                return
        reply = yield from self._step("check", self.name, entry_id)
        if reply[0] != "ok":
            return  # gone: its waiter hears of it from its session
        view = EntryView.parse(reply)
        if view.held:
            self.admitted(entry_id, view.capacity, view.version)
        else:
            self.time_check(entry_id, view)

    def confirm(self, waiter: Waiter, deadline: Deadline) -> Program[bool]:
        backend = self.backend
        session, key = backend.session, waiter.key
        if key is None or not key.startswith(session + "."):
            return False  # (an entry of a session already replaced)
        sent = time.monotonic()
        renewed = yield from backend.step("renew", (session,), self.where, deadline=deadline)
        if not flag(renewed):
            backend.keeper.wake()  # (it finds the session expired and makes a new one)
            return False
        backend.lease.renewed(sent)
        reply = yield from self._step("check", self.name, key, deadline=deadline)
        return bool(reply[0] == "ok" and EntryView.parse(reply).held)

    def waiting_entries(self) -> list[str]:
        """Our entries still waiting for their admission (looked at after a reconnect)."""
        with self._lock:
            return [k for k, r in self._routes.items() if not r.admitted]

    def check_holders(self, state: Callable[[str, int], int]) -> None:
        """Report each watched holder entry that is gone (``state(id, token)`` 0), and
        tell its holder of a revoke request (2) whose notification was lost (a
        listener reconnecting): the heartbeat bounds how late a holder learns of it."""
        with self._lock:
            watches = list(self._holder_watches.items())
        for key, (token, on_lost) in watches:
            seen = state(key, token)
            if seen == HOLDER_ASKED:
                self.revoke_requested(key)
            if seen == HOLDER_GONE:
                with self._lock:
                    found = self._holder_watches.pop(key, None)
                if found is not None:
                    on_lost("the entry is gone (deleted, or its session expired)")

    # ---- leaving -------------------------------------------------------------------------
    def unregister(self, waiter: Waiter) -> None:
        super().unregister(waiter)
        self.drop_route(waiter.entry_id)

    def leaving(self, key: str) -> None:
        """Our entry ``key`` is about to be removed: nothing of ours waits for it."""
        with self._lock:
            self._holder_watches.pop(key, None)
            self._routes.pop(key, None)
        self._revocations.forget(key)  # (after: no request is kept for it from now on)

    def drop_route(self, entry_id: str | None) -> None:
        if entry_id is not None:
            with self._lock:
                self._routes.pop(entry_id, None)

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        with self._lock:
            self._holder_watches[key] = (token, on_lost)

    def removing(self, key: str, sweep: bool = True) -> Program[None]:
        """Delete our entry ``key`` (its slot records go with it) and, with ``sweep``,
        admit what fits."""
        self.leaving(key)
        args = ([self.name], [key], self.backend.session, sweep)
        yield from self.backend.step("remove", args, self.where)

    def _sweep(self) -> Program[None]:
        yield from self.backend.step("check", (self.name, ""), self.where)

    def remove(self, key: str, slot_records: Mapping[int, int | None]) -> Program[None]:
        # (slot records are deleted with their entry: a foreign key's cascade)
        what = f"semaphore {self.name!r}: removing {key}"
        yield from self.backend.removal(what, self.removing(key), lambda: self.removing(key))

    def abandon(self, waiter: Waiter, slot_records: Mapping[int, int | None]) -> Program[None]:
        """The entry goes first, and the waiters it held back are admitted by a statement
        of its own, sent once this acquire has ended (:class:`.runner.Soon`): a
        successor in this process must find the abandoned acquire over, as a successor
        of a release finds the release done."""
        key = waiter.key or waiter.entry_id  # the id is chosen before the create
        if key is None:
            return
        what = f"semaphore {self.name!r}: removing {key}"
        first = self.removing(key, sweep=False)
        removed = yield from self.backend.removal(what, first, lambda: self.removing(key))
        if removed:  # (else the retry sweeps, or the next step or a waiter's look does)
            yield Soon(self._sweep, lambda: self.backend.in_background(self._sweep))

    # ---- job slots ---------------------------------------------------------------------
    def list_slots(
        self, waiter: Waiter, deadline: Deadline
    ) -> Program[frozenset[int] | SessionLost]:
        reply = yield from self._step("list_slots", self.name)
        return frozenset(int(i) for i in reply)

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> Program[int | frozenset[int] | SessionLost]:
        key = waiter.key
        assert key is not None
        reply = yield from self._step("take_slot", self.name, key, index)
        if reply[0] == "ok":
            return int(reply[1])
        if reply[0] == "taken":
            return frozenset(int(i) for i in reply[1])
        return SessionLost()

    # ---- reading and fencing -------------------------------------------------------------
    def status(self) -> Program[Status]:
        reply = yield from self._step("status", self.name)
        if reply is None:  # deleted: not the capacity we knew
            raise SemaphoreNotFound(self.name, self.backend.describe())
        # (rest: the drain flag, schema version 3; the ramp plan, schema version 4)
        capacity, version, rows, *rest = reply
        draining = bool(rest) and flag(rest[0])
        ramp = RampPlan.decode(self.name, rest[1] if len(rest) > 1 else None)
        self.apply_capacity(int(capacity), int(version), draining)
        entries = [
            EntryStatus(
                key,
                owner,
                int(weight),
                int(token),
                flag(held),
                float(since),
                tuple(sorted(int(i) for i in slots)),
                bool(asked) and flag(asked[0]),
            )
            for key, owner, weight, token, held, since, slots, *asked in rows
        ]  # fmt: skip (asked: the revoke request, schema version 4)
        entries.sort(key=lambda entry: entry.token)  # (MySQL's aggregate keeps no order)
        return split_queue(
            self.name,
            int(capacity),
            entries,
            draining=draining,
            ramp=ramp,
            config_version=int(version),
        )

    def transaction(self, key: str, token: int) -> FencedTransaction:
        return self.backend.fenced_transaction([(self.name, key)], token)
