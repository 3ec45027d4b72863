"""One semaphore's queue in ZooKeeper: the kazoo side of the protocol steps.

Every request here is sent with kazoo's async API so that requests of one step go out
back to back: ZooKeeper answers one session's requests in order, so the create and the
child listing of an enqueue cost one round trip. The capacity is read again only when
the listing's parent stat shows that it changed.

A client that cycles alone skips the listing (one request per acquire, like a raw
create): see ``_alone_since`` below and docs/design.md section 9.

Both faces run the same steps: each is written once as a program that yields the kazoo
requests in flight (or "wait until connected") and is run blocking by the sync methods
and awaited by the ``*_async`` ones (``._waits``); the asyncio face is woken by kazoo's
callback thread through the event loop, with no thread of its own.

Connection loss: a step waits for the connection to come back (within the acquire's
deadline) and goes on; a create whose reply was lost is looked for by its entry id
before creating again. Session expiry: the entries die with the session; a waiter
enters the queue again with kazoo's new session (see ``backend.py``). A cancelled or
interrupted acquire starts the delete of its entry (found by its id when the create's
reply has not come yet) and does not wait for it.

Bounds: the protocol steps wait within the acquire's deadline; every other call
(opening, status, set_capacity, a fenced commit, release) waits at most the backend's
request timeout for kazoo's replies, then raises BackendUnavailable (release logs and
goes on in the background instead).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KeeperState

from .._core.codec import (
    EntryData,
    decode_capacity,
    decode_entry,
    decode_slot,
    encode_capacity,
    encode_slot,
)
from .._core.deadline import Deadline
from .._core.names import (
    ZK_SLOT_PREFIX,
    join_path,
    new_entry_id,
    parse_slot_index,
    parse_zk_entry,
    validate_capacity,
    zk_entry_prefix,
    zk_slot_name,
)
from .._core.program import run_program, run_program_async
from .._core.protocol import Enqueued, EntryChanged, EntryHeld, SessionLost
from .._core.queue import Entry, EntryState
from .._core.status import EntryStatus, Status, split_queue
from ..backend import FencedTransaction, QueueDriver, Waiter, WriteKind, nearest_needed
from ..errors import (
    AcquireTimeout,
    BackendUnavailable,
    CapacityMismatch,
    PermitLost,
    SemaphoreNotFound,
    WriteConflict,
)
from . import _kazoo_compat
from ._listing import Listings, nearest_lower, sorted_entries
from ._waits import Await, Waits, ZkProgram

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

log = logging.getLogger("semaphore_recipes.zookeeper")


class ZooKeeperQueue(QueueDriver):
    mark_records_weight = False  # an entry's name carries its weight

    backend: ZooKeeperBackend

    def __init__(self, backend: ZooKeeperBackend, name: str) -> None:
        """No I/O: :meth:`opening` agrees the capacity (``backend.open_queue``)."""
        super().__init__(name, backend)
        self.client = backend.client
        self.path = join_path(backend.root, name)
        # kazoo's key for the capacity watch (chroot included): see _capacity_current
        self._watch_path = (self.client.chroot or "") + self.path
        self._capacity_settled = False  # the cached capacity is the watched node's value
        # Sequence number of our last entry that was alone in the queue (every entry
        # older than it gone) and has been deleted; None: unknown. See _enqueue_alone.
        self._alone_since: int | None = None
        self._alone: dict[str, int] = {}  # our live entries known alone -> their sequence
        self._marks_pending: set[str] = set()  # held marks handed to kazoo's callback thread
        self._listings = Listings()  # one listing for the enqueues of a burst (_listing.py)
        # our entry -> the session its slot records were made on (they die with it)
        self._slot_sessions: dict[str, int | None] = {}

    # ---- how programs are waited for --------------------------------------------
    def _step_waits(self, deadline: Deadline) -> Waits:
        """A protocol step's: within the acquire's deadline, then AcquireTimeout."""
        return Waits(self.backend, deadline, timed_out=self._no_answer_in_time, path=self.path)

    def _no_answer_in_time(self) -> AcquireTimeout:
        return AcquireTimeout(f"semaphore {self.name!r}: no answer from ZooKeeper in time")

    def _connection(self) -> ZkProgram[None]:
        """Wait until the client is connected (at once when it is)."""
        if not self.backend.connected:
            yield Await.CONNECTION

    # ---- capacity -------------------------------------------------------------
    def opening(
        self, capacity: int | None, adopt: bool, create: bool
    ) -> Callable[[], ZkProgram[int]]:
        """The opening, as a retry-safe attempt for ``backend.call``: create the node if
        ``create`` and it is missing, then read (and watch) the stored capacity; without
        ``create`` nothing is written. Returns the capacity; CapacityMismatch,
        SemaphoreNotFound."""

        def agree() -> ZkProgram[int]:
            created = False
            if create:
                assert capacity is not None
                with contextlib.suppress(NodeExistsError):
                    yield self.client.create_async(
                        self.path, encode_capacity(capacity), makepath=True
                    )
                    created = True
            # one watch per process on the capacity: a change wakes our waiters (read
            # after the create: a create with makepath may first create the parents)
            try:
                raw, stat = yield self.client.get_async(self.path, watch=self._capacity_event)
            except NoNodeError:
                if create:
                    raise
                where = f"ZooKeeper node {(self.client.chroot or '') + self.path}"
                raise SemaphoreNotFound(self.name, where) from None
            if created:
                log.info("created semaphore %r with capacity %d", self.name, capacity)
            stored = decode_capacity(self.name, raw)
            self._capacity_version = stat.mzxid
            self._capacity_settled = True
            if capacity is not None and stored != capacity and not adopt:
                raise CapacityMismatch(self.name, capacity, stored)
            self.capacity = stored
            return stored

        return agree

    def _capacity_event(self, event: Any) -> None:
        if self.backend.closed or (event.type == EventType.NONE and session_ended(event)):
            return  # the session ended: the backend re-arms us on the new session
        # a change, or the connection lost (kazoo drops every watch then): read again,
        # which kazoo sends once it is connected
        self.arm_capacity_watch()

    def forget_old_session(self) -> None:
        """Our entries died with the old session; lost permits are never released, so
        drop what we kept about them here."""
        with self._lock:
            self._alone.clear()
            self._marks_pending.clear()

    def arm_capacity_watch(self) -> None:
        self._capacity_settled = False  # until _capacity_read applies what this reads
        self.client.get_async(self.path, watch=self._capacity_event).rawlink(self._capacity_read)

    def _capacity_read(self, result: Any) -> None:
        try:
            raw, stat = result.get(block=False)
            capacity = decode_capacity(self.name, raw)
        except NoNodeError:
            return
        except (ConnectionLoss, SessionExpiredError) as exc:
            # Expected after an outage: kazoo fails the requests in flight on a dropped
            # connection or an expired session (with no message). Not settled, the
            # cached value is not trusted: the next acquire lists the queue and reads
            # the capacity if it changed; a new session arms the watch again.
            what = "session ended" if isinstance(exc, SessionExpiredError) else "connection dropped"
            log.info(
                "semaphore %r: a capacity read was cut off (%s: the %s); "
                "the next acquire checks the stored capacity",
                self.name,
                type(exc).__name__,
                what,
            )
            return
        except Exception as exc:  # CorruptState, an ACL, ...: keep the old value
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.error("semaphore %r: cannot read the new capacity: %s", self.name, detail)
            return
        self.apply_capacity(capacity, stat.mzxid)
        self._capacity_settled = True

    def _capacity_current(self) -> bool:
        """Is the cached capacity the stored one, as of the replies received so far?
        ZooKeeper sends a change's watch event before the reply to any later request,
        and kazoo's connection thread unregisters the watcher as it reads that event, so
        a registered watcher whose read has been applied means no change was missed."""
        return self._capacity_settled and _kazoo_compat.data_watch_registered(
            self.client, self._watch_path, self._capacity_event
        )

    def set_capacity(self, capacity: int) -> None:
        validate_capacity(capacity)
        self.backend.call(self._writing_capacity(capacity), f"writing {self.path}", self.path)

    async def set_capacity_async(self, capacity: int) -> None:
        validate_capacity(capacity)
        await self.backend.call_async(
            self._writing_capacity(capacity), f"writing {self.path}", self.path
        )

    def _writing_capacity(self, capacity: int) -> Callable[[], ZkProgram[None]]:
        def write() -> ZkProgram[None]:
            try:
                stat = yield self.client.set_async(self.path, encode_capacity(capacity))
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    yield self.client.create_async(
                        self.path, encode_capacity(capacity), makepath=True
                    )
                stat = yield self.client.exists_async(self.path)
            log.info("semaphore %r: capacity set to %d", self.name, capacity)
            self.apply_capacity(capacity, stat.mzxid)

        return write

    # ---- the protocol steps ---------------------------------------------------
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Enqueued:
        return run_program(self._enqueue(waiter), self._step_waits(deadline).wait)

    async def enqueue_async(self, waiter: Waiter, deadline: Deadline) -> Enqueued:
        return await run_program_async(self._enqueue(waiter), self._step_waits(deadline).wait_async)

    def _enqueue(self, waiter: Waiter) -> ZkProgram[Enqueued]:
        waiter.new_generation()
        while True:
            yield from self._connection()
            entry_id = new_entry_id()
            waiter.creating(entry_id)
            prefix = f"{self.path}/{zk_entry_prefix(entry_id, waiter.weight)}"
            data = EntryData(owner=waiter.owner, held=False, since=time.time()).encode()
            session = self.backend.session_id
            with self._lock:
                alone_since, self._alone_since = self._alone_since, None
            number, create = self._listings.create(
                functools.partial(
                    self.client.create_async,
                    prefix,
                    data,
                    ephemeral=True,
                    sequence=True,
                    include_data=True,
                )
            )
            listing = None
            if alone_since is None:
                # (the asyncio face lets the other tasks' creates go out first: one
                # listing then serves them all; the sync face goes on at once)
                yield Await.TURN
                listing = self._listings.after(number, self._list)
            try:
                path, stat = yield create
                if listing is None:
                    alone = self._enqueue_alone(waiter, path, stat.czxid, alone_since, session)
                    if alone is not None:
                        return alone
                    listing = self._listings.after(number, self._list)
                children, parent = yield listing.reply
                entries = listing.entries(children)
            except NoNodeError:
                log.warning("semaphore node %s vanished; creating it again", self.path)
                yield from self._recreate_node()
                continue
            except ConnectionLoss:
                # The create may or may not have happened: look for our id before
                # creating again, so no orphan entry blocks the queue.
                found = yield from self._find_after_lost_reply(waiter)
                if found is None:
                    continue
                path, stat, children, parent = found
                entries = sorted_entries(children)
            except SessionExpiredError:
                continue  # a create in the dead session died with it; kazoo makes a new one
            if parent.mzxid != self._capacity_version and not (yield from self._refresh_capacity()):
                continue  # the session ended meanwhile: that entry is gone with it
            if self.backend.session_id != session:
                continue  # raced a session change: that entry is gone with its session
            return self._enqueued(waiter, path, stat.czxid, entries)

    def _list(self) -> Any:
        return self.client.get_children_async(self.path, include_data=True)

    def _refresh_capacity(self) -> ZkProgram[bool]:
        """Read the capacity again and re-arm its watch (the listing showed it changed).
        A read is safe to repeat, so a lost connection is waited out within the deadline
        like any other step. False when the session (or the node) ended meanwhile."""
        while True:
            try:
                raw, stat = yield self.client.get_async(self.path, watch=self._capacity_event)
            except ConnectionLoss:
                yield from self._connection()
                continue
            except (SessionExpiredError, NoNodeError):
                return False
            self.apply_capacity(decode_capacity(self.name, raw), stat.mzxid)
            return True

    def _enqueue_alone(
        self, waiter: Waiter, path: str, czxid: int, alone_since: int | None, session: int | None
    ) -> Enqueued | None:
        """The one-request enqueue of a client cycling alone, or None: list after all.

        Our previous entry (sequence ``alone_since``) was at some moment the only entry,
        and we deleted it before this create. Every create in the queue takes the next
        sequence number of the parent, so if ours is ``alone_since + 1`` nobody created
        an entry in between: no entry can be lower than ours. A capacity change made
        before our create would have reached us before its reply (_capacity_current).
        """
        node = path.rsplit("/", 1)[1]
        parsed = parse_zk_entry(node)
        assert parsed is not None and alone_since is not None
        seq = parsed[2]
        if (
            seq != alone_since + 1
            or self.backend.session_id != session
            or not self._capacity_current()
            or waiter.weight > self.capacity
        ):
            return None
        with self._lock:
            self._alone[node] = seq
        waiter.created(node, czxid)
        me = Entry(key=node, order=seq, weight=waiter.weight)
        capacity, version = self.capacity_answer()
        return Enqueued(me, (), capacity, later_entries=False, capacity_version=version)

    def _enqueued(
        self, waiter: Waiter, path: str, czxid: int, entries: list[tuple[int, int, str]]
    ) -> Enqueued:
        node = path.rsplit("/", 1)[1]
        parsed = parse_zk_entry(node)
        assert parsed is not None
        _, weight, my_seq = parsed
        waiter.created(node, czxid)
        capacity, version = self.capacity_answer()
        # only the nearest entries below ours: all a waiter far back needs (design.md 2)
        lower, complete, later_entries = nearest_lower(entries, my_seq, nearest_needed(capacity))
        if not lower and not later_entries:
            with self._lock:
                self._alone[node] = my_seq
        me = Entry(key=node, order=my_seq, weight=weight)
        return Enqueued(
            me,
            lower,
            capacity,
            later_entries=later_entries,
            capacity_version=version,
            lower_complete=complete,
        )

    def _find_after_lost_reply(
        self, waiter: Waiter
    ) -> ZkProgram[tuple[str, Any, list[str], Any] | None]:
        while True:
            yield from self._connection()
            listing = self.client.get_children_async(self.path, include_data=True)
            try:
                children, parent = yield listing
                mine = [c for c in children if c.startswith(f"e-{waiter.entry_id}-")]
                if not mine:
                    log.info(
                        "create of %r was lost before it reached ZooKeeper; creating again",
                        self.name,
                    )
                    return None
                path = f"{self.path}/{mine[0]}"
                stat = yield self.client.exists_async(path)
                if stat is None:
                    return None
                log.info("create reply of %r was lost; adopted entry %s", self.name, mine[0])
                return path, stat, children, parent
            except ConnectionLoss:
                continue
            except (SessionExpiredError, NoNodeError):
                return None

    def _recreate_node(self) -> ZkProgram[None]:
        while True:
            try:
                with contextlib.suppress(NodeExistsError):
                    yield self.client.create_async(
                        self.path, encode_capacity(self.capacity), makepath=True
                    )
                return
            except (ConnectionLoss, SessionExpiredError):
                yield Await.CONNECTION  # a create of a node is safe to repeat

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost:
        return run_program(self._arm(waiter, keys), self._step_waits(deadline).wait)

    async def arm_async(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost:
        return await run_program_async(
            self._arm(waiter, keys), self._step_waits(deadline).wait_async
        )

    def _arm(
        self, waiter: Waiter, keys: tuple[str, ...]
    ) -> ZkProgram[Mapping[str, EntryState | None] | SessionLost]:
        generation = waiter.generation
        while True:
            pending = [
                (
                    key,
                    self.client.get_async(
                        f"{self.path}/{key}", watch=self._entry_watch(waiter, generation, key)
                    ),
                )
                for key in keys
            ]
            states: dict[str, EntryState | None] = {}
            try:
                for key, reply in pending:
                    try:
                        raw, _ = yield reply
                        data = decode_entry(key, raw)
                        states[key] = EntryState(held=data.held, lower=data.lower)
                    except NoNodeError:
                        # (a get on a missing node leaves no watch behind)
                        states[key] = self.gone_state(key)
                return states
            except ConnectionLoss:
                yield Await.CONNECTION
            except SessionExpiredError:
                return SessionLost()

    def relist(self, waiter: Waiter, deadline: Deadline) -> list[Entry] | SessionLost:
        return run_program(self._relist(waiter), self._step_waits(deadline).wait)

    async def relist_async(self, waiter: Waiter, deadline: Deadline) -> list[Entry] | SessionLost:
        return await run_program_async(self._relist(waiter), self._step_waits(deadline).wait_async)

    def _relist(self, waiter: Waiter) -> ZkProgram[list[Entry] | SessionLost]:
        assert waiter.key is not None
        parsed = parse_zk_entry(waiter.key)
        assert parsed is not None
        my_seq = parsed[2]
        children = yield from self._children()
        if isinstance(children, SessionLost):
            return children
        lower = []
        for child in children:
            p = parse_zk_entry(child)
            if p is not None and p[2] < my_seq:
                lower.append(Entry(key=child, order=p[2], weight=p[1]))
        return lower

    def _children(self, *lost: type[Exception]) -> ZkProgram[list[str] | SessionLost]:
        """The semaphore node's children, waiting out a lost connection; SessionLost
        when the session ended (or one of ``lost`` was raised)."""
        while True:
            try:
                children: list[str] = yield self.client.get_children_async(self.path)
                return children
            except ConnectionLoss:
                yield Await.CONNECTION
            except (SessionExpiredError, *lost):
                return SessionLost()

    # ---- job slots: ephemeral nodes +slot+<index> beside the entries ----------------------
    def list_slots(self, waiter: Waiter, deadline: Deadline) -> frozenset[int] | SessionLost:
        return run_program(self._listing_slots(), self._step_waits(deadline).wait)

    async def list_slots_async(
        self, waiter: Waiter, deadline: Deadline
    ) -> frozenset[int] | SessionLost:
        return await run_program_async(self._listing_slots(), self._step_waits(deadline).wait_async)

    def _listing_slots(self) -> ZkProgram[frozenset[int] | SessionLost]:
        children = yield from self._children(NoNodeError)  # (no node: our entry went with it)
        if isinstance(children, SessionLost):
            return children
        indices = (parse_slot_index(child, ZK_SLOT_PREFIX) for child in children)
        return frozenset(index for index in indices if index is not None)

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> int | frozenset[int] | SessionLost:
        return run_program(self._taking_slot(waiter, index), self._step_waits(deadline).wait)

    async def take_slot_async(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> int | frozenset[int] | SessionLost:
        return await run_program_async(
            self._taking_slot(waiter, index), self._step_waits(deadline).wait_async
        )

    def _taking_slot(
        self, waiter: Waiter, index: int
    ) -> ZkProgram[int | frozenset[int] | SessionLost]:
        """A multi: check that our entry exists (so the record is made on its session,
        while it lives), create the ephemeral record; the read of the record's czxid
        (its token: a multi's reply has no stat) goes right behind it, one round trip."""
        key = waiter.key
        assert key is not None
        entry_path = f"{self.path}/{key}"
        slot_path = f"{self.path}/{zk_slot_name(index)}"
        while True:
            yield from self._connection()
            tx = self.client.transaction()
            tx.check(entry_path, -1)  # version -1: any version, the node must exist
            tx.create(slot_path, encode_slot(key), ephemeral=True)
            self.slot_sending(key, index)
            with self._lock:  # made on this session or not at all (the check)
                self._slot_sessions[key] = self.backend.session_id
            multi = tx.commit_async()
            stat_reply = self.client.exists_async(slot_path)
            try:
                results = yield multi
                stat = yield stat_reply
            except ConnectionLoss:
                try:
                    found = yield from self._slot_after_lost_reply(key, slot_path)
                except SessionExpiredError:
                    return SessionLost()
                if found is None:
                    continue  # not created: again
                if found < 0:
                    self.slot_answered(key, index, None)
                    return (yield from self._listing_slots())
                log.info("create reply of slot %d of %r was lost; adopted it", index, self.name)
                self.slot_answered(key, index, found)
                return found
            except SessionExpiredError:
                return SessionLost()
            check, create = results
            if isinstance(check, Exception) and not isinstance(check, RolledBackError):
                self.slot_answered(key, index, None)
                return SessionLost()  # our entry is gone: enter the queue again
            if isinstance(create, Exception):
                self.slot_answered(key, index, None)
                if isinstance(create, NoAuthError):
                    raise self.backend.permission_denied(slot_path, create) from create
                if not isinstance(create, NodeExistsError):
                    raise create
                return (yield from self._listing_slots())  # another entry holds it
            assert stat is not None  # read behind our create on the same session
            self.slot_answered(key, index, stat.czxid)
            return int(stat.czxid)

    def _slot_after_lost_reply(self, key: str, slot_path: str) -> ZkProgram[int | None]:
        """After a lost multi reply: the record's czxid if it names our entry, -1 if
        it names another, None if there is none (the multi did not land)."""
        while True:
            yield from self._connection()
            try:
                raw, stat = yield self.client.get_async(slot_path)
            except NoNodeError:
                return None
            except ConnectionLoss:
                continue
            mine = decode_slot(slot_path, raw)[0] == key
            return int(stat.czxid) if mine else -1

    def _entry_watch(self, waiter: Waiter, generation: int, key: str) -> Callable[[Any], None]:
        def fired(event: Any) -> None:
            if event.type == EventType.DELETED:
                waiter.post(generation, self.deleted_event(key))
            elif event.type == EventType.CHANGED:
                waiter.post(generation, EntryHeld(key))  # the held mark is the only write
            elif event.type == EventType.NONE and session_ended(event):
                waiter.post(generation, SessionLost())
            elif event.type == EventType.NONE:
                # the connection was lost and kazoo dropped the watch: read it again
                # (the Arm goes out once connected); the entry keeps its place
                waiter.post(generation, EntryChanged(key))

        return fired

    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        """Sent without waiting: safety never depends on the mark, it wakes successors.

        kazoo's callback thread encodes and sends it, not the acquiring thread: a kazoo
        request from this thread hands the GIL to kazoo's connection thread for its whole
        send, and the acquire would spend that and the JSON encoding before returning
        (figures: docs/design.md section 9). A mark still pending when the permit is
        released is neither encoded nor sent. The entry's name is unique: a set on it
        never re-creates an entry that is gone."""
        path = f"{self.path}/{key}"
        data = b""
        self.forget_mark(key)
        with self._lock:
            self._marks_pending.add(key)

        def marked(result: Any) -> None:
            try:
                result.get(block=False)
            except NoNodeError:
                on_lost("the entry was gone when its held mark was written")
            except SessionExpiredError:
                on_lost("the session expired before the held mark was written")
            except ConnectionLoss:
                if not self.backend.closed:
                    self.client.set_async(path, data).rawlink(marked)  # sent on reconnect
            except KazooException as exc:
                log.warning("held mark of %s failed: %r", path, exc)

        def send() -> None:
            nonlocal data
            with self._lock:
                if key not in self._marks_pending:
                    return  # released (or abandoned) already
                self._marks_pending.discard(key)
            data = mark.encode()
            self.client.set_async(path, data).rawlink(marked)

        _kazoo_compat.run_on_callback_thread(self.client, send)

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        path = f"{self.path}/{key}"

        def fired(event: Any) -> None:
            if event.type == EventType.DELETED:
                on_lost("the entry was deleted")
            elif event.type == EventType.CHANGED or (
                # our own held mark, or the connection lost (kazoo dropped the watch):
                # watch on (sent once connected); a session end is the permit's business
                event.type == EventType.NONE and not session_ended(event)
            ):
                self.client.exists_async(path, watch=fired).rawlink(checked)

        def checked(result: Any) -> None:
            with contextlib.suppress(KazooException):
                if result.get(block=False) is None:
                    on_lost("the entry was gone when its watch was set")

        self.client.exists_async(path, watch=fired).rawlink(checked)

    # ---- leaving ----------------------------------------------------------------
    def remove(self, key: str) -> None:
        run_program(self._removing(key), self._delete_waits().wait)

    async def remove_async(self, key: str) -> None:
        await run_program_async(self._removing(key), self._delete_waits().wait_async)

    def _removing(self, key: str) -> ZkProgram[None]:
        self.forget_mark(key)
        alone = self._forget_entry(key)
        if (yield from self._deleting_entry(key)) and alone is not None:
            with self._lock:
                self._alone_since = alone  # deleted, reply in hand: see _enqueue_alone

    def _deleting_entry(self, key: str) -> ZkProgram[bool]:
        """Delete our entry ``key`` and its slot records in one ``multi`` (so no
        admitted newcomer ever sees a record whose entry is gone); :meth:`_deleting`'s
        bounds. A record already gone (deleted by hand) fails the multi: then the
        records go first, one by one, and the entry last."""
        path = f"{self.path}/{key}"
        slot_paths = yield from self._own_slot_paths(key)
        if not slot_paths:
            return (yield from self._deleting(path))
        tx = self.client.transaction()
        for slot_path in slot_paths:
            tx.delete(slot_path)
        tx.delete(path)
        try:
            results = yield tx.commit_async()
            if not any(isinstance(r, Exception) for r in results):
                return True
        except BaseException as exc:
            # no answer in time, the connection lost, an interrupt: sent again in order,
            # records first (a multi applied meanwhile makes them no-ops)
            for slot_path in slot_paths:
                self._delete_slot_in_background(key, slot_path)
            self._delete_in_background(path)
            if not isinstance(exc, Exception):
                raise
            return False
        # our entry or a record was deleted by hand: each alone, the records first, each
        # only while it names our entry (another's may have taken a freed index)
        for slot_path in slot_paths:
            if (yield from self._names(key, slot_path)):
                yield from self._deleting(slot_path)
        return (yield from self._deleting(path))

    def _own_slot_paths(self, key: str) -> ZkProgram[list[str]]:
        """The paths of our entry ``key``'s slot records, which leaves now: those
        confirmed, and those whose create was interrupted before its reply and that name
        our entry (the read goes out after the create on the same session, so it sees it
        if it landed). None when their session has ended: they went with it, and an index
        may be another entry's by now."""
        records = self.slots_leaving(key)
        with self._lock:
            session = self._slot_sessions.pop(key, None)
        if not records or session != self.backend.session_id or self.backend.failure:
            return []
        paths = []
        for index, token in sorted(records.items()):
            slot_path = f"{self.path}/{zk_slot_name(index)}"
            if token is not None or (yield from self._names(key, slot_path)):
                paths.append(slot_path)
        return paths

    def _names(self, key: str, slot_path: str) -> ZkProgram[bool]:
        """Does the slot record ``slot_path`` exist and name our entry ``key``? (False
        when it cannot be read: never raises; the session's end removes it.)"""
        try:
            raw, _ = yield self.client.get_async(slot_path)
            return decode_slot(slot_path, raw)[0] == key
        except NoNodeError:
            return False
        except Exception as exc:
            log.warning("could not read slot record %s: %r", slot_path, exc)
            return False

    def _forget_entry(self, key: str) -> int | None:
        """Our entry ``key`` leaves: drop its pending held mark and what the lone-client
        path kept of it (its sequence number, returned)."""
        with self._lock:
            self._marks_pending.discard(key)
            return self._alone.pop(key, None)

    def abandon(self, waiter: Waiter) -> None:
        run_program(self._abandoning(waiter), self._delete_waits().wait)

    async def abandon_async(self, waiter: Waiter) -> None:
        await run_program_async(self._abandoning(waiter), self._delete_waits().wait_async)

    def _abandoning(self, waiter: Waiter) -> ZkProgram[None]:
        """Delete the waiter's entry, waiting for the replies at most the request timeout
        (then in the background): the exact entry, or, its create's reply not in hand,
        the one the listing finds by its id (sent after the create on the same session,
        it sees the create if it landed)."""
        if waiter.key is not None:
            self._forget_entry(waiter.key)
            yield from self._deleting_entry(waiter.key)
            return
        entry_id = waiter.entry_id
        if entry_id is None or self.backend.failure is not None:
            return  # nothing was sent; or the server removes the entry with the session
        try:
            children = yield self.client.get_children_async(self.path)
        except NoNodeError:
            return
        except Exception:  # no answer in time, connection lost, client closed: never raises
            self._delete_by_id(entry_id)  # the background goes on from a fresh listing
            return
        for child in children:
            if child.startswith(f"e-{entry_id}-"):
                log.info("removing entry %s left by an interrupted acquire", child)
                yield from self._deleting(f"{self.path}/{child}")

    def abandon_nowait(self, waiter: Waiter) -> None:
        """Start the delete and return: the exact entry, or (its create's reply not in
        hand) the listing that finds it by its id, sent after the create on the same
        session, so it sees the create if it landed."""
        if waiter.key is not None:
            self._forget_entry(waiter.key)
            self._delete_slots_in_background(waiter.key)
            self._delete_in_background(f"{self.path}/{waiter.key}")
        elif waiter.entry_id is not None:
            self._delete_by_id(waiter.entry_id)

    def _delete_waits(self) -> Waits:
        deadline = Deadline(self.request_timeout, time.monotonic)
        return Waits(self.backend, deadline, timed_out=_DeletePending, path=self.path)

    def _deleting(self, path: str) -> ZkProgram[bool]:
        """Delete exactly ``path`` (unique id + sequence: it can only be ours). Waits for
        the reply at most the request timeout; if the connection is down, kazoo sends it
        on reconnect and a ConnectionLoss sends it again until it lands or the session
        is gone. Never raises but an interrupt or a cancellation (the delete goes on).
        True when the reply says it is done."""
        if self.backend.failure is not None:
            log.warning("not deleting %s: %s", path, self.backend.failure)
            return False
        reply = self.client.delete_async(path)
        try:
            yield reply
            return True
        except _DeletePending:
            log.warning("delete of %s is pending until ZooKeeper is reachable again", path)
        except KazooException:
            pass  # _deleted below sorts it out
        except Exception as exc:  # the client closed, or kazoo's own failure
            if not self.backend.closed:
                log.warning("delete of %s failed: %r", path, exc)
        except BaseException:
            reply.rawlink(self._deleted(path))  # interrupted: the delete is on its way
            raise
        # Only now: a callback costs a hop through kazoo's callback thread.
        reply.rawlink(self._deleted(path))
        return False

    def _delete_in_background(self, path: str) -> None:
        """Send the delete of exactly ``path``; its reply is seen to on kazoo's thread."""
        if self.backend.failure is not None:
            log.warning("not deleting %s: %s", path, self.backend.failure)
            return
        self.client.delete_async(path).rawlink(self._deleted(path))

    def _delete_slots_in_background(self, key: str) -> None:
        """Send the reads that delete our entry ``key``'s slot records, before the
        entry's delete (one session answers in order), when their session still lives."""
        records = self.slots_leaving(key)
        with self._lock:
            session = self._slot_sessions.pop(key, None)
        if session != self.backend.session_id:
            return  # they went with their session
        for index in sorted(records):
            self._delete_slot_in_background(key, f"{self.path}/{zk_slot_name(index)}")

    def _delete_slot_in_background(self, key: str, slot_path: str) -> None:
        """Delete the slot record ``slot_path`` once a read shows it names our entry
        ``key`` (an index freed meanwhile may be another entry's), on kazoo's thread."""

        def read(result: Any) -> None:
            with contextlib.suppress(Exception):  # gone, or the session's end takes it
                raw, _ = result.get(block=False)
                if decode_slot(slot_path, raw)[0] == key:
                    self._delete_in_background(slot_path)

        if self.backend.failure is None:
            self.client.get_async(slot_path).rawlink(read)

    def _deleted(self, path: str) -> Callable[[Any], None]:
        """The reply of a delete of ``path``, on kazoo's callback thread: sent again
        after a ConnectionLoss, until it lands or the session is gone."""

        def done(result: Any) -> None:
            try:
                result.get(block=False)
            except ConnectionLoss:
                if not self.backend.closed:
                    self.client.delete_async(path).rawlink(done)
            except (NoNodeError, SessionExpiredError, ConnectionClosedError):
                pass
            except Exception as exc:
                log.error("could not delete %s: %r", path, exc)

        return done

    def _delete_by_id(self, entry_id: str) -> Any:
        """After an interrupted create: find the entry by its id and delete it, on kazoo's
        callback thread. The listing goes out on the same session after the create, so
        it sees the create if it landed. Returns the listing's reply (None: not sent)."""

        def listed(result: Any) -> None:
            try:
                children = result.get(block=False)
            except ConnectionLoss:
                if not self.backend.closed:
                    self.client.get_children_async(self.path).rawlink(listed)
                return
            except KazooException:
                return
            for child in children:
                if child.startswith(f"e-{entry_id}-"):
                    log.info("removing entry %s left by an interrupted acquire", child)
                    self._delete_in_background(f"{self.path}/{child}")

        if self.backend.failure is not None:
            return None  # the server removes the entry with the session
        reply = self.client.get_children_async(self.path)
        reply.rawlink(listed)
        return reply

    # ---- reading and fencing -------------------------------------------------------
    def status(self) -> Status:
        return self._status_of(
            self.backend.call(self._reading_status, f"reading {self.path}", self.path)
        )

    async def status_async(self) -> Status:
        return self._status_of(
            await self.backend.call_async(self._reading_status, f"reading {self.path}", self.path)
        )

    def _reading_status(self) -> ZkProgram[tuple[int, list[tuple[int, EntryStatus]]] | None]:
        listing = self.client.get_children_async(self.path)
        capacity_reply = self.client.get_async(self.path)
        try:
            children = yield listing
            raw, _ = yield capacity_reply
        except NoNodeError:
            return None
        capacity = decode_capacity(self.name, raw)
        entries = []
        slot_reads = []
        for child in children:
            p = parse_zk_entry(child)
            if p is not None:
                entries.append((p, child, self.client.get_async(f"{self.path}/{child}")))
            index = parse_slot_index(child, ZK_SLOT_PREFIX)
            if index is not None:
                slot_reads.append((index, child, self.client.get_async(f"{self.path}/{child}")))
        slots: dict[str, list[int]] = {}  # entry -> its slots
        for index, child, reply in slot_reads:
            try:
                raw, _ = yield reply
            except NoNodeError:
                continue  # left while we listed
            slots.setdefault(decode_slot(child, raw)[0], []).append(index)
        rows = []
        for (_, weight, seq), child, reply in entries:
            try:
                raw, stat = yield reply
            except NoNodeError:
                continue  # left while we listed
            data = decode_entry(child, raw)
            held_slots = tuple(sorted(slots.get(child, ())))
            row = EntryStatus(
                child, data.owner, weight, stat.czxid, data.held, data.since, held_slots
            )
            rows.append((seq, row))
        return capacity, rows

    def _status_of(self, found: tuple[int, list[tuple[int, EntryStatus]]] | None) -> Status:
        if found is None:  # deleted, or the store lost its data: not the capacity we knew
            where = f"ZooKeeper node {(self.client.chroot or '') + self.path}"
            raise SemaphoreNotFound(self.name, where)
        capacity, rows = found
        rows.sort(key=lambda r: r[0])
        return split_queue(self.name, capacity, (r[1] for r in rows))

    def transaction(self, key: str, token: int) -> ZooKeeperFencedTransaction:
        # An entry's name is never reused (unique id and sequence): its existence is the fence.
        return ZooKeeperFencedTransaction(self, f"{self.path}/{key}")


class _DeletePending(Exception):
    """No reply to a delete within the request timeout (it goes on in the background)."""


class ZooKeeperFencedTransaction(FencedTransaction):
    """A kazoo multi that starts with a check that the permit's entry exists.

    The entry is ephemeral and its name unique, so the multi commits only while the
    permit's session is alive and the permit not released. Keys are paths inside the
    URL's chroot; a created key's parent must exist. ``commit()`` waits for the reply
    at most the request timeout, then raises BackendUnavailable: the multi may still be
    applied after that (kazoo sends it when the connection comes back, and the fence
    holds only while the session lives), so read back before committing again.
    """

    def __init__(self, queue: ZooKeeperQueue, entry_path: str, others: Sequence[str] = ()) -> None:
        """``others``: more entry paths that fence it (a multi-permit's)."""
        super().__init__()
        self._queue = queue
        self.entry_path = entry_path
        self._fences = [entry_path, *others]

    def commit(self) -> None:
        run_program(self._committing(), self._waits().wait)

    async def commit_async(self) -> None:
        await run_program_async(self._committing(), self._waits().wait_async)

    def _waits(self) -> Waits:
        queue = self._queue
        timeout = queue.request_timeout

        def timed_out() -> BackendUnavailable:
            return BackendUnavailable(
                f"no answer from ZooKeeper within the request timeout ({timeout:g}"
                " s): the transaction may still be applied"
            )

        deadline = Deadline(timeout, time.monotonic)
        return Waits(queue.backend, deadline, timed_out=timed_out, path=self.entry_path)

    def _committing(self) -> ZkProgram[None]:
        queue = self._queue
        tx = queue.client.transaction()
        for fence in self._fences:
            tx.check(fence, -1)  # version -1: any version, the node must exist
        for write in self.writes:
            if write.kind is WriteKind.CREATE:
                tx.create(write.key, write.value)
            elif write.kind is WriteKind.SET:
                tx.set_data(write.key, write.value, -1)
            else:
                tx.delete(write.key, -1)
        try:
            results = yield tx.commit_async()
        except SessionExpiredError as exc:
            raise PermitLost(f"session expired: {self.entry_path} is gone") from exc
        except ConnectionLoss as exc:
            raise BackendUnavailable(
                f"ZooKeeper unreachable: {exc!r}; the transaction may have been applied"
            ) from exc
        paths = [*self._fences, *(write.key for write in self.writes)]
        for path, result in zip(paths, results, strict=False):
            if isinstance(result, NoAuthError):
                raise queue.backend.permission_denied(path, result) from result
        for path, fence in zip(self._fences, results, strict=False):
            if isinstance(fence, Exception) and not isinstance(fence, RolledBackError):
                raise PermitLost(f"fence failed: {path} is gone") from fence
        for write, result in zip(self.writes, results[len(self._fences) :], strict=False):
            if isinstance(result, NodeExistsError):
                raise WriteConflict(write.key, "it exists") from result
            if isinstance(result, NoNodeError):
                raise WriteConflict(write.key, "it (or its parent) does not exist") from result
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise result


def session_ended(event: Any) -> bool:
    """Was a watch fired with kazoo's NONE event because the session ended, rather than
    because the connection was lost (kazoo drops every watch then too, firing it with
    the state CONNECTING, while the session may resume)?"""
    return event.state in (KeeperState.EXPIRED_SESSION, KeeperState.CLOSED, KeeperState.AUTH_FAILED)
