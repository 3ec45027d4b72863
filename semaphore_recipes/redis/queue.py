"""One semaphore's queue on Redis: the protocol steps as scripts the server decides.

Admission is decided by the scripts (:mod:`.scripts`), atomically, at every change of
the queue: an enqueue that fits is admitted in its own round trip, and a release or a
capacity increase admits exactly the waiters that now fit, marks them held and pushes
one message to each one's client. The store declares it (``server_admission``): the
core protocol (``_core.protocol.store_admission``) never arms, relists nor writes a held
mark here, and what this driver tells it is the server's decision:

* the enqueue answers whether its script admitted the entry (``Enqueued.admitted``;
  also when the admission message overtook the reply);
* a later admission message posts ``StoreAdmitted`` for the entry (with
  ``wait_replicas``, BackendFailed instead when too few replicas have the grant);
* job slots (``acquire(slot=True)``) are given by the script that admits the entry,
  and come with the admission (``Enqueued.slots``, ``StoreAdmitted.slots``): no round
  trip after it (``Capabilities(admission_slots=True)``);
* a waiter that hears nothing looks again (the ``CHECK`` script, whose sweep admits and
  tells as any other) when the lease it depends on would expire: a crashed holder is
  noticed within the session timeout and a little.

On connection loss a waiting entry looks once when the notifier reconnects (its
messages wait in the inbox meanwhile); when the lease expired, its entries are dead and
the waiters enter the queue again with the new lease (``RedisBackend.session_ended``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._core.ramp import RampPlan
from ..backend import (
    Deadline,
    Enqueued,
    Entry,
    EntryStatus,
    Program,
    QueueDriver,
    RevocationWatches,
    Slot,
    Status,
    StoreAdmitted,
    Waiter,
    split_queue,
    validate_capacity,
)
from ..errors import BackendUnavailable, CapacityMismatch, Draining, SemaphoreNotFound
from .calls import Arg, Soon, command
from .scripts import ScriptName
from .transaction import RedisFencedTransaction

if TYPE_CHECKING:
    from .backend import RedisBackend


#: a look after the lease a waiter depends on would have expired comes this much later
CHECK_MARGIN = 0.05


@dataclass
class _Route:
    """A waiting entry of ours: where its admission message goes, and whether it came
    (it may overtake the enqueue's reply)."""

    waiter: Waiter
    generation: int
    admitted: bool = False
    slots: tuple[Slot, ...] = ()  # given with the admission (job slots)


@dataclass(frozen=True)
class EntryView:
    """A script's reply about one entry (see ``view`` in :mod:`.scripts`): no other
    entry is listed, as the server decides admission."""

    order: int
    held: bool
    capacity: int
    version: int
    later: bool
    check_in: float | None  # seconds, None: nothing to time
    slots: tuple[Slot, ...]  # a held entry's job slots (when it asked for them)

    @classmethod
    def parse(cls, reply: bytes | str) -> EntryView:
        """``order held capacity version later check_in [index token ...]``."""
        fields = [int(field) for field in reply.split()]
        check_in = fields[5]
        return cls(
            order=fields[0],
            held=bool(fields[1]),
            capacity=fields[2],
            version=fields[3],
            later=bool(fields[4]),
            check_in=check_in / 1000 if check_in >= 0 else None,
            slots=parse_slots(fields[6:]),
        )


def parse_slots(flat: Sequence[Any]) -> tuple[Slot, ...]:
    """Job slots as the scripts write them: ``[index1, token1, ...]``."""
    return tuple(Slot(int(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def lease_lost(reply: object) -> bool:
    """Does a script's reply say our lease had expired (nothing was done)?"""
    return isinstance(reply, list) and len(reply) == 1 and reply[0] == b"lost"


def refuse_abandoned(reply: object, entry_id: str, where: str) -> None:
    """An enqueue's reply saying its id was removed before it was made (an abandoned
    acquire's tombstone: :mod:`.scripts`). Its acquire is over when that happens, so
    no acquire should read it: BackendUnavailable if one does."""
    if isinstance(reply, list) and reply == [b"abandoned"]:
        raise BackendUnavailable(f"{where}: entry {entry_id} was removed before it was made")


class RedisQueue(QueueDriver):
    backend: RedisBackend

    def __init__(self, backend: RedisBackend, name: str) -> None:
        super().__init__(name, backend)
        #: the key prefix of this semaphore's scripts (:mod:`.layout`)
        self.prefix = backend.layout.of(name)
        # (made once: every script call sends them first, and names them in its errors)
        self._head = (self.prefix.encode(), name.encode())
        self._where = f"semaphore {name!r} on {backend.describe()}"
        self._routes: dict[str, _Route] = {}
        self._holder_watches: dict[str, tuple[int, Callable[[str], None]]] = {}
        self._revocations = RevocationWatches()  # our holders told of revoke requests
        #: the lease the scripts know as one of the openers (told of capacity changes)
        self._opener: str | None = None

    def _args(self, *rest: Arg) -> tuple[Arg, ...]:
        return (*self._head, *rest)

    def _run_script(
        self,
        name: ScriptName,
        *rest: Arg,
        deadline: Deadline | None = None,
        retry: bool = True,
        replicas: int = 0,
    ) -> Program[Any]:
        return self.backend.script(
            name, self._args(*rest), self._where, deadline=deadline, retry=retry, replicas=replicas
        )

    def entries_key(self) -> str:
        """The hash of this semaphore's entries (status tools, the test harness)."""
        return f"{self.prefix}:s:{self.name}:e"

    # ---- opening and capacity ----------------------------------------------------------
    def open(
        self, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[RedisQueue]:
        if create and capacity:
            yield from self.backend.leasing(self.prefix, where=self._where)
            lease = self.backend.lease
            reply = yield from self._run_script(ScriptName.OPEN, capacity, lease)
            self._opener = lease
        else:  # writes nothing: a reader may (capacity changes: looked at, see below)
            reply = yield from self._run_script(ScriptName.CONFIG)
        if not reply:
            raise SemaphoreNotFound(self.name, self.backend.describe())
        stored, version = int(reply[0]), int(reply[1])
        self.apply_capacity(stored, version)
        if capacity is not None and stored != capacity and not adopt_capacity:
            raise CapacityMismatch(self.name, capacity, stored)
        return self

    @property
    def looks_at_capacity(self) -> bool:
        """Not among the openers the scripts tell of capacity changes (opened without
        writing, or our lease changed since it joined): the notifier reads the capacity
        now and then (:meth:`look_at_capacity`) until an entry of ours makes us one."""
        return self._opener != self.backend.lease

    def look_at_capacity(self) -> Program[None]:
        """Read the stored capacity (the notifier's look for an open that wrote nothing);
        a missing semaphore is left to the next call to find."""
        reply = yield from self._run_script(ScriptName.CONFIG)
        if reply:
            self.apply_capacity(int(reply[0]), int(reply[1]))

    def set_capacity(self, capacity: int) -> Program[None]:
        validate_capacity(capacity)  # (before any I/O: when the program is made)
        return self._setting_capacity(capacity)

    def _setting_capacity(self, capacity: int) -> Program[None]:
        version = yield from self._run_script(ScriptName.SET_CAPACITY, capacity)
        self.apply_capacity(capacity, int(version))

    def set_draining(self, draining: bool) -> Program[None]:
        reply = yield from self._run_script(ScriptName.SET_DRAINING, "1" if draining else "")
        if not reply:
            raise SemaphoreNotFound(self.name, self.backend.describe())
        self.apply_capacity(int(reply[0]), int(reply[1]), draining)

    def write_ramp(self, capacity: int, ramp: RampPlan | None, version: int) -> Program[int | None]:
        validate_capacity(capacity)  # (before any I/O: when the program is made)
        return self._writing_ramp(capacity, "" if ramp is None else ramp.encode(), version)

    def _writing_ramp(self, capacity: int, plan: str, version: int) -> Program[int | None]:
        reply = yield from self._run_script(ScriptName.RAMP_STEP, capacity, version, plan)
        if isinstance(reply, list):
            raise SemaphoreNotFound(self.name, self.backend.describe())
        if not reply:
            return None
        self.apply_capacity(capacity, int(reply))
        return int(reply)

    # ---- the protocol steps ------------------------------------------------------------
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        self.backend.check_open()  # (before an entry id is chosen: nothing to abandon)
        self.drop_route(waiter.entry_id)
        while True:
            yield from self.backend.leasing(self.prefix, deadline, self._where)
            lease = self.backend.lease
            # (the backend's counter: two semaphore objects of one name share the queue)
            entry_id = f"{lease}.{self.name}.{self.backend.new_id()}"
            self.creating(waiter, entry_id)
            capacity, _ = self.capacity_answer()
            replicas = self.backend.params.wait_replicas
            reply = yield from self._run_script(
                ScriptName.ENQUEUE,
                entry_id,
                lease,
                waiter.weight,
                waiter.owner,
                capacity,
                "1" if waiter.wants_slots else "",
                "" if lease == self._opener else "1",
                deadline=deadline,
                replicas=replicas,
            )
            acknowledged = replicas
            if replicas:
                reply, acknowledged = reply
            refuse_abandoned(reply, entry_id, self._where)
            if isinstance(reply, list) and reply == [b"draining"]:  # (no entry was made)
                raise Draining(self.name)
            if lease_lost(reply):  # our lease expired: the keeper makes a new one
                self.drop_route(entry_id)
                yield from self.backend.await_new_lease(lease, deadline)
                continue
            view = EntryView.parse(reply)
            self._opener = lease
            waiter.created(entry_id, view.order)
            self.backend.history.note_counter(self.prefix, view.order)  # (the counter's)
            if view.held and acknowledged < replicas:  # the face's cleanup removes it
                raise self.unreplicated(acknowledged)
            return self.enqueued(waiter, entry_id, view)

    def creating(self, waiter: Waiter, entry_id: str) -> None:
        """An enqueue attempt of ``waiter`` is about to create ``entry_id``: its
        admission message, which may overtake the reply, is routed to it from now on."""
        # A generation per attempt: a lease this attempt gave up on is reported to the
        # attempt that made an entry with it, not to this one.
        generation = waiter.new_generation()
        with self._lock:
            self._routes[entry_id] = _Route(waiter, generation)
        waiter.creating(entry_id)  # before the create: an interrupted acquire finds it

    def enqueued(self, waiter: Waiter, entry_id: str, view: EntryView) -> Enqueued:
        """The Enqueue step's answer for our entry ``entry_id`` created as ``view`` says:
        admitted by the script, or by a message that overtook its reply (then it lists
        nothing before us), with the job slots it asked for (else BackendUnavailable:
        :meth:`missing_slots`); a waiter gets its look timed. The script that made the
        entry made our lease one of the semaphore's openers."""
        self._opener = self.backend.lease
        with self._lock:
            route = self._routes.get(entry_id)
            admitted = view.held or (route is not None and route.admitted)
            slots = view.slots if view.held or route is None else route.slots
            if route is not None:
                route.admitted = admitted
        if admitted:
            missing = self.missing_slots(waiter, slots)
            if missing is not None:  # (the face's cleanup removes the entry)
                raise missing
        if not admitted and view.check_in is not None:
            self.backend.notifier.schedule(self, entry_id, view.check_in + CHECK_MARGIN)
        # (a view, not a refusal: the semaphore did not drain as of that version)
        self.apply_capacity(view.capacity, view.version, False)
        if admitted:
            capacity, version = view.capacity, view.version
        else:
            capacity, version = self.capacity_answer()
        return Enqueued(
            me=Entry(key=entry_id, order=view.order, weight=waiter.weight),
            lower=(),
            capacity=capacity,
            later_entries=view.later,
            capacity_version=version,
            admitted=admitted,
            slots=slots if admitted and waiter.wants_slots else None,
        )

    # ---- what the server tells us (the notifier's thread) ----------------------------------
    def unreplicated(self, acknowledged: int) -> BackendUnavailable:
        """The error of a grant that too few replicas acknowledged (``wait_replicas``)."""
        replicas = self.backend.params.wait_replicas
        return BackendUnavailable(
            f"semaphore {self.name!r}: the grant reached {acknowledged} of the "
            f"{replicas} replica(s) wait_replicas asks for; not granted"
        )

    def missing_slots(self, waiter: Waiter, slots: tuple[Slot, ...]) -> BackendUnavailable | None:
        """The error of an admission without the job slots ``waiter`` asked for (one
        per permit): a script that does not give them admitted it, i.e. a client of an
        older version shares the prefix. Not granted rather than granted without
        slots (nor with slots that script did not count)."""
        if not waiter.wants_slots or len(slots) == waiter.weight:
            return None
        return BackendUnavailable(
            f"semaphore {self.name!r}: admitted with {len(slots)} of the {waiter.weight} "
            "job slot(s) asked for (a client of an older version shares this prefix?); "
            "not granted"
        )

    def admitted(
        self,
        entry_id: str,
        capacity: int,
        version: int,
        slots: tuple[Slot, ...],
        acknowledged: int | None = None,
    ) -> None:
        """The server admitted our entry ``entry_id`` under ``capacity`` (its script
        marked it held, and gave it ``slots`` if it asked for them): StoreAdmitted for
        it. With ``wait_replicas``, ``acknowledged`` replicas have the grant: too few,
        and the acquire ends with BackendUnavailable (its cleanup removes the entry), as
        it does when the slots it asked for did not come (:meth:`missing_slots`)."""
        self.apply_capacity(capacity, version)
        with self._lock:
            route = self._routes.get(entry_id)
            if route is None or route.admitted:
                return
            route.admitted = True
            route.slots = slots
        if acknowledged is not None and acknowledged < self.backend.params.wait_replicas:
            reason = str(self.unreplicated(acknowledged))
            route.waiter.post_backend_failed(reason)
            return
        missing = self.missing_slots(route.waiter, slots)
        if missing is not None:
            route.waiter.post_backend_failed(str(missing))
            return
        decided = slots if route.waiter.wants_slots else None
        route.waiter.post(route.generation, StoreAdmitted(entry_id, decided))

    # ---- revocation: a flag in the entry, told through the holder's inbox ------------------
    def request_revoke(self, key: str, token: int) -> Program[bool]:
        return bool((yield from self._run_script(ScriptName.REVOKE, key, token, "")))

    def remove_revoked(self, key: str, token: int) -> Program[bool]:
        return bool((yield from self._run_script(ScriptName.REVOKE, key, token, "force")))

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
        """A waiter's timed look (the notifier runs it): admits what fits, drops a dead
        predecessor, and times the next look."""
        with self._lock:
            route = self._routes.get(entry_id)
            if route is None or route.admitted:
                return
        reply = yield from self._run_script(ScriptName.CHECK, entry_id)
        if reply[0] == b"wait" and int(reply[1]) >= 0:
            delay = int(reply[1]) / 1000 + CHECK_MARGIN
            self.backend.notifier.schedule(self, entry_id, delay)

    def confirm(self, waiter: Waiter, deadline: Deadline) -> Program[bool]:
        """The lease renewed (a step does not renew it), then our entry read."""
        backend = self.backend
        lease, key, token = backend.lease, waiter.key, waiter.token
        assert key is not None
        ttl_ms = int(backend.keeper.ttl * 1000)
        where = f"{self._where}: confirming {key}"
        renewed = yield from backend.script(
            ScriptName.RENEW, (self.prefix, "", lease, ttl_ms), where, deadline=deadline
        )
        if not renewed:
            backend.keeper.lease_gone()  # (it makes a new lease and tells the waiters)
            return False
        entries = self.entries_key()
        raw = yield from command(("HGET", entries, key), where, backend.params, key=entries)
        return raw is not None and json.loads(raw).get("t") == token

    def waiting_entries(self) -> list[str]:
        """Our entries still waiting for their admission (looked at after a reconnect)."""
        with self._lock:
            return [k for k, r in self._routes.items() if not r.admitted]

    def check_holders(self, exists: Callable[[str, int], bool]) -> None:
        """Report each watched holder entry that is gone (``exists(id, token)``)."""
        with self._lock:
            watches = list(self._holder_watches.items())
        for key, (token, on_lost) in watches:
            if not exists(key, token):
                with self._lock:
                    found = self._holder_watches.pop(key, None)
                if found is not None:
                    on_lost("the entry is gone (deleted, or its lease expired)")

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
        """Forget where the events of the entry ``entry_id`` went (None: nothing)."""
        if entry_id is not None:
            with self._lock:
                self._routes.pop(entry_id, None)

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        with self._lock:
            self._holder_watches[key] = (token, on_lost)

    def _removal(self, key: str, sweep: bool = True) -> Program[None]:
        self.leaving(key)
        yield from self._run_script(
            ScriptName.REMOVE, key, self.backend.lease, "" if sweep else "later"
        )

    def _sweep(self) -> Program[None]:
        yield from self._run_script(ScriptName.REMOVE, "", self.backend.lease)

    def remove(self, key: str, slot_records: Mapping[int, int | None]) -> Program[None]:
        # (job slots live in the entry: ``slot_records`` is always empty here)
        yield from self.backend.removal(
            f"semaphore {self.name!r}: removing {key}",
            self._removal(key),
            lambda: self._removal(key),
        )

    def abandon(self, waiter: Waiter, slot_records: Mapping[int, int | None]) -> Program[None]:
        """The entry goes first, and the waiters it held back are admitted by a script
        of its own, sent once this acquire has ended (:class:`.calls.Soon`): the other
        backends' successors hear of a deletion after its reply on the same connection,
        and a successor in this process must likewise find the abandoned acquire over
        (their admission message comes on another connection, and could overtake the
        reply)."""
        key = waiter.key or waiter.entry_id  # the id is chosen before the create
        if key is None:
            return
        removed = yield from self.backend.removal(
            f"semaphore {self.name!r}: removing {key}",
            self._removal(key, sweep=False),
            lambda: self._removal(key),
        )
        if removed:  # (the next script or a waiter's timed look sweeps, if this fails)
            yield Soon(self._sweep, lambda: self.backend.in_background(self._sweep))

    # ---- reading and fencing -----------------------------------------------------------------
    def status(self) -> Program[Status]:
        reply = yield from self._run_script(ScriptName.STATUS)
        if not reply:  # deleted, or the store lost its data: not the capacity we knew
            raise SemaphoreNotFound(self.name, self.backend.describe())
        draining = bool(int(reply[2]))
        self.apply_capacity(int(reply[0]), int(reply[1]), draining)
        rows = [
            EntryStatus(
                _text(reply[i]),
                _text(reply[i + 1]),
                int(reply[i + 2]),
                int(reply[i + 3]),
                bool(int(reply[i + 4])),
                float(reply[i + 5]),
                tuple(sorted(slot.index for slot in parse_slots(reply[i + 6]))),
                bool(int(reply[i + 7])),
            )
            for i in range(4, len(reply), 8)
        ]
        return split_queue(
            self.name,
            int(reply[0]),
            rows,
            draining=draining,
            ramp=RampPlan.decode(self.name, reply[3]),
            config_version=int(reply[1]),
        )

    def transaction(self, key: str, token: int) -> RedisFencedTransaction:
        return RedisFencedTransaction(self, key, token)


def decode_message(raw: bytes) -> dict[str, Any] | None:
    """A message of the inbox (see :mod:`.scripts`), or None if unreadable."""
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None
