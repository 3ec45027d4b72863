"""One semaphore's queue in etcd: the etcd side of the protocol steps.

Layout: ``<prefix><name>/config`` holds ``{"capacity": N}``; each entry is
``<prefix><name>/entries/<lease>-<slot>`` on the session lease, ordered by
create_revision. A backend reuses its slot numbers once their entries are deleted, so
the keys under ``entries/`` stay few: etcd's range walks every key deleted since the
last compaction, and fresh keys per acquire made the enqueue slower with every grant.
A reused key is a new entry with a new create_revision (reads compare it).
The enqueue is one txn: create-if-absent of our key plus a range of the entries and of
the config, so it is one round trip and the listing is atomic with the create (no
later entry can exist in it). That range stops after ``nearest_needed`` entries: a
short queue is listed whole in the one round trip; a longer one's nearest entries below
ours are read next, outside the txn, by a read shared with the waiters enqueuing at the
same time (docs/design.md section 2, "Truncated views"). A retried enqueue after a lost
reply takes the failure branch, which lists every entry: the entry made by the lost
attempt is adopted.

When the lease ends, every waiter of the backend enqueues again on the one new lease; an
enqueue that finds its lease replaced while its txn was on its way deletes the entry it
created (by its create_revision) before trying again, so no entry outlives its acquire.

Each step is a program (:mod:`.runner`) that both faces run: blocking for
``sr.connect``, awaited for ``sr.aio.connect`` (same requests, same retries, same
errors). Connection loss: a step retries UNAVAILABLE within its deadline (the acquire's,
or the request timeout), then AcquireTimeout / BackendUnavailable; a delete that cannot
reach etcd goes on in the background until the queue closes. A cancelled asyncio acquire
deletes its entry in the background, after its create's outcome if the create was still
on its way (the cancel does not un-send it).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._core.codec import (
    EntryData,
    decode_capacity,
    decode_entry,
    decode_slot,
    encode_capacity,
    encode_slot,
)
from .._core.deadline import Deadline
from .._core.names import parse_etcd_entry, parse_slot_index, validate_capacity
from .._core.program import Program
from .._core.protocol import (
    Enqueued,
    EntryChanged,
    EntryMarked,
    SessionLost,
)
from .._core.queue import Entry, EntryState, nearest_needed
from .._core.status import EntryStatus, Status, split_queue
from ..backend import FencedTransaction, QueueDriver, Waiter, WriteKind
from ..errors import (
    AcquireTimeout,
    BackendUnavailable,
    CapacityMismatch,
    CorruptState,
    PermissionDenied,
    PermitLost,
    SemaphoreNotFound,
    WriteConflict,
)
from . import _proto  # noqa: F401  (makes the generated package importable first)
from ._proto import etcd_api_pb2 as pb
from .errors import (
    EtcdAuthError,
    EtcdCompacted,
    EtcdError,
    EtcdLeaseNotFound,
    EtcdUnavailable,
)
from .ops import Compare, Op, prefix_range_end
from .retry import retrying
from .rpc import Call
from .turns import AwaitTurn, Turns
from .watch import Watcher

if TYPE_CHECKING:
    from .backend import EtcdBackend

log = logging.getLogger("semaphore_recipes.etcd")

ATTEMPT_TIMEOUT = 2.0  # seconds one request may take before it is retried (it is retry-safe)


_SHARED_READ_SPAN = 1024  # revisions above its own token a shared read serves
_SHARED_READ_WAIT = 60.0  # seconds a waiter for a shared read waits before looking again


@dataclass(frozen=True)
class SharedRead:
    """A read of the newest entries created before ``top`` (newest first), made at
    ``revision``; ``more``: it was cut at its limit."""

    revision: int
    top: int
    kvs: list[Any]
    more: bool
    # the entries' create_revisions, negated: ascending, for bisect
    _order: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_order", [-kv.create_revision for kv in self.kvs])

    def nearest(self, token: int, count: int) -> tuple[list[Any], bool] | None:
        """The ``count`` newest entries created before ``token`` and whether they are all
        of them, if this read tells them: it was made after the entry ``token`` was
        created (no entry below it can appear later; some may have left since, as after
        any read) and ``token`` is within its bound; else None."""
        if self.revision < token or token > self.top:
            return None
        first = bisect.bisect_right(self._order, -token)  # the newest created before
        below = len(self.kvs) - first
        if not self.more:
            return self.kvs[first : first + count], below <= count
        if below >= count:
            return self.kvs[first : first + count], False
        return None


def txn_within(
    compare: list[Any], success: list[Any], failure: list[Any], creates: str, timeout: float
) -> Call:
    """A txn that creates the entry ``creates``, sent with ``timeout`` (for ``call``)."""
    return Call.txn(compare, success, failure, timeout=timeout, creates=creates)


class EtcdQueue(QueueDriver):
    """One semaphore's queue. Made by :meth:`EtcdBackend.open_queue` (or its asyncio
    twin, which runs the same :meth:`open` program): each step is a program of the
    backend's runner (:mod:`.runner`), blocking or awaited."""

    backend: EtcdBackend

    def __init__(self, backend: EtcdBackend, name: str) -> None:
        super().__init__(name, backend)
        self.client = backend.client
        self.base = f"{backend.prefix}{name}/"  # every key of this semaphore
        self.config_key = (self.base + "config").encode()
        self.entries_prefix = (self.base + "entries/").encode()
        self.entries_end = prefix_range_end(self.entries_prefix)
        self.slots_prefix = (self.base + "slots/").encode()  # job slots: slots/<index>
        self._slots = Op.range(self.slots_prefix, prefix_range_end(self.slots_prefix))
        # the reads of every enqueue and status txn (built once: they never change)
        self._reads = [
            Op.range(self.entries_prefix, self.entries_end),
            Op.range(self.config_key),
        ]
        self._watchers: dict[Waiter, dict[str, Watcher]] = {}
        self._tokens: dict[str, int] = {}  # our entries' create_revisions
        self._holder_watchers: dict[str, Watcher] = {}  # acquire(watch_entry=True)
        self._marks_pending: set[tuple[str, int]] = set()  # marks handed to the background
        self._listed: dict[tuple[bytes, int], Entry] = {}  # decoded entries of the last listing
        self._closed = False
        self._capacity_watch: Watcher | None = None
        # the shared read of the entries below new waiters (``_nearest_below``)
        self._below_waiting: set[int] = set()  # tokens of the waiters needing theirs
        self._below_reading = False
        self._below_turns = Turns(self._lock)  # a turn ends with each read
        self._below_last: SharedRead | None = None

    def open(self, capacity: int | None, adopt_capacity: bool, create: bool) -> Program[EtcdQueue]:
        """Agree on the capacity (creating the semaphore if ``create``), then watch it."""
        self.capacity = yield from self._agree_capacity(capacity, adopt_capacity, create)
        self._capacity_watch = Watcher(
            self.client,
            self.config_key,
            start_revision=self._capacity_version + 1,
            on_events=self._capacity_events,
            on_error=self._capacity_watch_failed,
        )
        self.backend.register_queue(self)
        return self

    def entry_key(self, uid: str) -> bytes:
        """The etcd key of our entry ``uid`` in this queue."""
        return self.entries_prefix + uid.encode()

    def nearest_below(
        self, token: int, count: int, deadline: Deadline
    ) -> Program[tuple[list[Any], bool]]:
        """:meth:`_nearest_below` (the shared read), for the multi-acquire (``multi.py``)."""
        return self._nearest_below(token, count, deadline)

    def call(self, make: Callable[[float], Call], deadline: Deadline | None = None) -> Program[Any]:
        """:meth:`_call`, for the multi-acquire's programs (``multi.py``)."""
        return self._call(make, deadline)

    def _call(
        self, make: Callable[[float], Call], deadline: Deadline | None = None
    ) -> Program[Any]:
        """Make a retry-safe call, retrying UNAVAILABLE until the deadline: an acquire's
        (then AcquireTimeout), or by default the request timeout (then
        BackendUnavailable). ``make`` gets the time one attempt may take."""
        limit = Deadline(self.request_timeout, time.monotonic) if deadline is None else deadline
        try:
            return (yield from retrying(make, limit, attempt_timeout=ATTEMPT_TIMEOUT))
        except EtcdUnavailable as exc:
            if deadline is None:
                raise BackendUnavailable(
                    f"etcd unreachable (request timeout {self.request_timeout:g} s): {exc}"
                ) from exc
            raise AcquireTimeout(f"semaphore {self.name!r}: etcd did not answer in time") from exc
        except EtcdLeaseNotFound:
            raise  # the caller starts a new session
        except EtcdAuthError as exc:
            raise self.backend.permission_denied(f"keys under {self.base}", exc) from exc
        except EtcdError as exc:
            raise BackendUnavailable(f"etcd refused the request: {exc}") from exc

    # ---- capacity --------------------------------------------------------------
    def _agree_capacity(self, capacity: int | None, adopt: bool, create: bool) -> Program[int]:
        """Create the config key if ``create`` and it is missing (one txn that also reads
        it), else only read it: without ``create`` nothing is written."""
        if create:
            assert capacity is not None
            reply = yield from self._call(
                lambda timeout: Call.txn(
                    [Compare.create_revision(self.config_key, "==", 0)],
                    [Op.put(self.config_key, encode_capacity(capacity)), Op.range(self.config_key)],
                    [Op.range(self.config_key)],
                    timeout=timeout,
                )
            )
            kvs = reply.responses[-1].response_range.kvs
            if reply.succeeded:
                log.info("created semaphore %r with capacity %d", self.name, capacity)
        else:
            reply = yield from self._call(
                lambda timeout: Call.range(self.config_key, timeout=timeout)
            )
            kvs = reply.kvs
            if not kvs:
                raise SemaphoreNotFound(self.name, f"etcd key {self.config_key.decode()}")
        stored = decode_capacity(self.name, kvs[0].value)
        self._capacity_version = kvs[0].mod_revision
        if capacity is not None and stored != capacity and not adopt:
            raise CapacityMismatch(self.name, capacity, stored)
        return stored

    def _capacity_events(self, events: list[Any], revision: int) -> None:
        for event in events:
            if event.type == pb.Event.PUT:
                try:
                    self.apply_capacity(
                        decode_capacity(self.name, event.kv.value), event.kv.mod_revision
                    )
                except CorruptState as exc:
                    log.error("%s", exc)

    def _capacity_watch_failed(self, exc: Exception) -> None:
        if isinstance(exc, EtcdCompacted) and not self._closed:
            # read it afresh and watch from there, in the background (a watch callback
            # must not wait for a reply)
            self.backend.spawn(self._rewatch_capacity())
        else:
            log.error("semaphore %r: capacity watch ended: %s", self.name, exc)

    def _rewatch_capacity(self) -> Program[None]:
        reply = yield from self._call(lambda timeout: Call.range(self.config_key, timeout=timeout))
        if reply.kvs:
            self.apply_capacity(
                decode_capacity(self.name, reply.kvs[0].value), reply.kvs[0].mod_revision
            )
        if self._closed:
            return
        self._capacity_watch = Watcher(
            self.client,
            self.config_key,
            start_revision=reply.header.revision + 1,
            on_events=self._capacity_events,
            on_error=self._capacity_watch_failed,
        )

    def set_capacity(self, capacity: int) -> None:
        self.backend.run(self._set_capacity(capacity))

    async def set_capacity_async(self, capacity: int) -> None:
        await self.backend.run_async(self._set_capacity(capacity))

    def _set_capacity(self, capacity: int) -> Program[None]:
        validate_capacity(capacity)
        reply = yield from self._call(
            lambda timeout: Call.put(self.config_key, encode_capacity(capacity), timeout=timeout)
        )
        log.info("semaphore %r: capacity set to %d", self.name, capacity)
        self.apply_capacity(capacity, reply.header.revision)

    # ---- waiters ---------------------------------------------------------------
    def unregister(self, waiter: Waiter) -> None:
        super().unregister(waiter)
        self.drop_watchers(waiter)

    def apply_listed_capacity(self, config: Any) -> None:
        """Apply the capacity a txn read beside a listing (``config``: its kvs), when
        newer than the one applied (decoded only then: usually it is not)."""
        if config and config[0].mod_revision > self._capacity_version:
            self.apply_capacity(decode_capacity(self.name, config[0].value), config[0].mod_revision)

    def drop_watchers(self, waiter: Waiter) -> None:
        """End the watches armed for ``waiter`` (its acquire is over, or enqueues again)."""
        with self._lock:
            watchers = self._watchers.pop(waiter, {})
        self._cancel(watchers.values())

    def _cancel(self, watchers: Any) -> None:
        """Cancel watches (a request queued on the client's watch stream, no wait: a
        callback of theirs still running posts to an old generation, which is dropped).
        Never called holding ``_lock``, which their callbacks take."""
        for watcher in watchers:
            watcher.cancel(timeout=0)

    # ---- the protocol steps ------------------------------------------------------
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Enqueued:
        return self.backend.run(self._enqueue(waiter, deadline))

    async def enqueue_async(self, waiter: Waiter, deadline: Deadline) -> Enqueued:
        return await self.backend.run_async(self._enqueue(waiter, deadline))

    def _enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        self.drop_watchers(waiter)
        while True:
            # A generation per attempt: the end of the lease an attempt gave up on may
            # still be reported to it; the next attempt must not take that for its own.
            waiter.new_generation()
            lease = yield from self.backend.lease(deadline)
            uid = self.backend.take_entry_slot(lease)
            self.key_reused(uid)
            waiter.creating(uid)
            key = self.entry_key(uid)
            value = EntryData(
                owner=waiter.owner, held=False, since=time.time(), weight=waiter.weight
            ).encode()
            # The listing in the txn is cut at ``nearest`` entries in key order (the
            # server reads only those): the whole queue when it is short. A longer
            # queue's nearest entries are read next, outside the write (see below).
            nearest = nearest_needed(self.capacity) + 1  # + 1: ours
            sample = Op.range(self.entries_prefix, self.entries_end, limit=nearest)
            try:
                # Retried as is after UNAVAILABLE: if the lost attempt created the key,
                # the failure branch lists it and we adopt it (no orphan, no second entry).
                # That listing is whole: the adopted entry may be anywhere in it.
                # ``creates``: the asyncio face lets it finish even when the acquire is
                # cancelled, so the undo never overtakes it (gRPC does not order calls).
                # The sync face holds an interrupt until the txn returns (SyncRunner).
                create: Callable[[float], Call] = functools.partial(
                    txn_within,
                    [Compare.create_revision(key, "==", 0)],
                    [Op.put(key, value, lease=lease), sample, self._reads[1]],
                    self._reads,
                    uid,
                )
                reply = yield from self._call(create, deadline)
            except EtcdLeaseNotFound:
                self.backend.lease_gone(lease)
                continue  # refused: nothing was created
            except PermissionDenied:
                # a refused txn wrote nothing: no entry to clean up
                waiter.creating(None)
                self.backend.free_entry_slot(uid)
                raise
            listed = reply.responses[-2].response_range
            listing = listed.kvs
            if reply.succeeded:
                # our put is the txn's one write: created at the txn's revision
                token, entry_lease = int(reply.header.revision), lease
            else:
                mine = [kv for kv in listing if kv.key == key]
                if not mine:
                    self.backend.free_entry_slot(uid)
                    continue  # created on a lease that has since expired: gone already
                token, entry_lease = mine[0].create_revision, mine[0].lease
            if entry_lease != self.backend.lease_id:
                # The lease ended while the txn was on its way (the backend has moved on,
                # or is granting a new one). The entry goes with its lease, but not
                # before the lease's end is applied: delete it now, by its own revision,
                # so it never sits ahead of the waiters.
                yield from self.delete_entry(uid, token)
                continue
            config = reply.responses[-1].response_range.kvs
            self.apply_listed_capacity(config)
            if not (reply.succeeded and listed.more):
                return self.enqueued(waiter, uid, token, listing, complete=True, later=None)
            # A long queue: its nearest entries below ours, newest first. etcd reads
            # every entry to sort them, so this is a read of its own, not part of the
            # write: inside it, each enqueue held up etcd's apply (and the lease
            # renewals that wait for it) for as long as the queue is long. Read after
            # our create, it may miss entries deleted meanwhile (entries only leave:
            # still a superset of the lower set), but successors may have seen them:
            # they may need our held mark (``later_entries``).
            waiter.created(uid, token)  # an error or a cancel below: the entry is undone
            below, complete = yield from self._nearest_below(token, nearest - 1, deadline)
            return self.enqueued(waiter, uid, token, below, complete, later=True)

    def _nearest_below(
        self, token: int, count: int, deadline: Deadline
    ) -> Program[tuple[list[Any], bool]]:
        """The ``count`` newest entries created before ``token`` (newest first), and
        whether they are all of them. Shared by the waiters of this queue that need
        theirs at the same time: etcd reads and sorts every entry of the queue for such a
        read whatever its limit, so a read per waiter cost a burst of W enqueues O(W²)
        on the server. One caller reads for every waiter registered when it starts
        (within ``_SHARED_READ_SPAN`` revisions above its own token); the others wait
        for its turn to end and take theirs from its reply, or read next."""
        with self._lock:
            self._below_waiting.add(token)
        try:
            while True:
                with self._lock:
                    found = self._below_last.nearest(token, count) if self._below_last else None
                    if found is not None:
                        return found
                    reading = self._below_reading
                    if reading:
                        turn = self._below_turns.turn
                    else:
                        self._below_reading = True
                        top = max(t for t in self._below_waiting if t <= token + _SHARED_READ_SPAN)
                if reading:
                    if deadline.expired():
                        raise AcquireTimeout(
                            f"semaphore {self.name!r}: etcd did not answer in time"
                        )
                    # woken when the turn ends (the reader's ``finally``); no polling:
                    # thousands of waiters waking every second starved the loop
                    yield AwaitTurn(self._below_turns, turn, deadline.cap(_SHARED_READ_WAIT))
                    continue
                last: SharedRead | None = None
                try:
                    # entries created between ``token`` and ``top`` are at most
                    # ``top - token``: the limit leaves ``count`` below every token read for
                    reply = yield from self._call(
                        functools.partial(self._newest_below, top, count + top - token),
                        deadline,
                    )
                    last = SharedRead(int(reply.header.revision), top, list(reply.kvs), reply.more)
                finally:
                    with self._lock:
                        if last is not None:
                            self._below_last = last
                        self._below_reading = False
                        self._below_turns.end()
                    self._below_turns.wake()
        finally:
            with self._lock:
                self._below_waiting.discard(token)

    def _newest_below(self, top: int, limit: int, timeout: float) -> Call:
        """A read of the ``limit`` newest entries created before ``top``."""
        return Call.range(
            self.entries_prefix,
            self.entries_end,
            max_create_revision=top - 1,
            newest=limit,
            timeout=timeout,
        )

    def enqueued(
        self,
        waiter: Waiter,
        uid: str,
        token: int,
        listing: Any,
        complete: bool,
        later: bool | None,
    ) -> Enqueued:
        """The answer from ``listing``; ``later``: None when the listing tells it."""
        waiter.created(uid, token)
        with self._lock:
            self._tokens[uid] = token
        lower = self._entries([kv for kv in listing if kv.create_revision < token])
        if later is None:
            later = any(kv.create_revision > token for kv in listing)
        # our own entry is what we just wrote: not decoded again
        me = Entry(key=uid, order=token, weight=waiter.weight, held=False)
        capacity, version = self.capacity_answer()
        return Enqueued(
            me,
            tuple(lower),
            capacity,
            later_entries=later,
            capacity_version=version,
            lower_complete=complete,
        )

    def _decode(self, kv: Any) -> tuple[str, int, EntryData]:
        """``(key, weight, data)`` of a listed entry; CorruptState unless it is one the
        library writes (``<lease hex>-<slot>``, readable, weight >= 1). Acquire and status
        both read entries through here: one decoder, one verdict."""
        uid = kv.key[len(self.entries_prefix) :].decode(errors="replace")
        parse_etcd_entry(uid)
        data = decode_entry(uid, kv.value)
        if data.weight is None or data.weight < 1:
            raise CorruptState(f"queue entry {kv.key!r} has no weight >= 1: {kv.value!r}")
        return uid, data.weight, data

    def _entry(self, kv: Any) -> Entry:
        uid, weight, data = self._decode(kv)
        return Entry(key=uid, order=kv.create_revision, weight=weight, held=data.held)

    def _entries(self, kvs: Any) -> list[Entry]:
        """The listed entries, each decoded once per version: a write's revision names
        its key, creation and value, so ``(key, mod_revision)`` seen in the previous
        listing is not decoded again. Every waiter lists every entry below its own, so
        decoding them all each time made a queue of n waiters cost n² decodes, enough
        to keep an event loop with many waiters from its lease's keepalives."""
        known = self._listed
        fresh: dict[tuple[bytes, int], Entry] = {}
        for kv in kvs:
            version = (kv.key, kv.mod_revision)
            entry = known.get(version)
            fresh[version] = self._entry(kv) if entry is None else entry
        self._listed = fresh  # (a concurrent listing's may win: it is as good a cache)
        return list(fresh.values())

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost:
        return self.backend.run(self._arm(waiter, keys, deadline))

    async def arm_async(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost:
        return await self.backend.run_async(self._arm(waiter, keys, deadline))

    def _arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        generation = waiter.generation
        token = waiter.token
        assert token is not None
        reads = [Op.range(self.entry_key(k)) for k in keys]
        reply = yield from self._call(
            lambda timeout: Call.txn([], reads, [], timeout=timeout), deadline
        )
        states: dict[str, EntryState | None] = {}
        for key, response in zip(keys, reply.responses, strict=True):
            kvs = response.response_range.kvs
            if not kvs:
                # gone: a view kept under its key is its own or a newer entry's (key_reused),
                # whose view holds every live entry below ours too
                states[key] = self.gone_state(key)
                continue
            if kvs[0].create_revision >= token:
                states[key] = None  # gone, its key reused by an entry created after ours
                continue
            data = decode_entry(key, kvs[0].value)
            states[key] = EntryState(held=data.held, lower=data.lower)
            self._watch(waiter, generation, key, kvs[0].create_revision, reply.header.revision + 1)
        return states

    def relist(self, waiter: Waiter, deadline: Deadline) -> list[Entry] | SessionLost:
        return self.backend.run(self._relist(waiter, deadline))

    async def relist_async(self, waiter: Waiter, deadline: Deadline) -> list[Entry] | SessionLost:
        return await self.backend.run_async(self._relist(waiter, deadline))

    def _relist(self, waiter: Waiter, deadline: Deadline) -> Program[list[Entry] | SessionLost]:
        token = waiter.token
        assert token is not None
        reply = yield from self._call(
            lambda timeout: Call.range(
                self.entries_prefix,
                self.entries_end,
                max_create_revision=token - 1,
                timeout=timeout,
            ),
            deadline,
        )
        return self._entries(reply.kvs)

    def _watch(
        self, waiter: Waiter, generation: int, key: str, token: int, start_revision: int
    ) -> None:
        """A watch on one entry from ``start_revision``: nothing between the read and the
        watch is missed. A held mark's event carries the mark, so the waiter is handed
        it and the watch stays (no read, no new watch); any other event ends it."""
        fired = threading.Event()

        def on_events(events: list[Any], revision: int) -> None:
            for event in events:
                if fired.is_set():
                    break  # later events: the slot reused by a newer entry
                if event.type != pb.Event.DELETE:
                    try:
                        data = decode_entry(key, event.kv.value)
                    except CorruptState:
                        data = None
                    if data is not None and data.held:
                        waiter.post(generation, EntryMarked(key, data.lower))
                        continue
                fired.set()
                if event.type == pb.Event.DELETE:
                    waiter.post(generation, self.deleted_event(key, token))
                else:
                    waiter.post(generation, EntryChanged(key))  # read it again
            if not fired.is_set():
                return
            with self._lock:
                watcher = self._watchers.get(waiter, {}).pop(key, None)
            if watcher is not None:
                watcher.cancel(timeout=0)

        def on_error(exc: Exception) -> None:
            # e.g. history compacted: treat it as a fired watch, the waiter reads again
            if not fired.is_set():
                fired.set()
                waiter.post(generation, EntryChanged(key))

        watcher = Watcher(
            self.client,
            self.entry_key(key),
            start_revision=start_revision,
            on_events=on_events,
            on_error=on_error,
        )
        with self._lock:
            old = self._watchers.setdefault(waiter, {}).pop(key, None)
            self._watchers[waiter][key] = watcher
        if old is not None:
            self._cancel([old])

    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        """Sent without waiting (in the background: a pool thread, or a task of the
        loop). Guarded by our create_revision, so a mark can never re-create an entry
        that is gone; the put keeps the entry's own lease. A mark still waiting for its
        turn when the permit is released is not sent at all."""
        self.forget_mark(key)
        pending = (key, token)  # by token too: a released entry's slot may be reused
        with self._lock:
            self._marks_pending.add(pending)
        self.backend.spawn(self._write_mark(key, token, mark, on_lost))

    def _write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> Program[None]:
        lease, _ = parse_etcd_entry(key)  # the entry's own lease, whatever the current one
        with self._lock:
            if (key, token) not in self._marks_pending:
                return  # released (or abandoned) already
            self._marks_pending.discard((key, token))
        value = mark.encode()  # by the background: not on acquire's path
        if self._closed:
            return
        guard = [Compare.create_revision(self.entry_key(key), "==", token)]
        put = [Op.put(self.entry_key(key), value, lease=lease)]
        try:
            reply = yield from retrying(
                lambda timeout: Call.txn(guard, put, [], timeout=timeout),
                Deadline(None, time.monotonic),
                attempt_timeout=ATTEMPT_TIMEOUT,
                stop=lambda: self._closed,
            )
        except EtcdLeaseNotFound:
            on_lost("the lease was gone when the held mark was written")
            return
        except EtcdUnavailable:
            return  # closed meanwhile: revoking the lease removes the entry
        except EtcdError as exc:
            log.warning("held mark of %s failed: %s", key, exc)
            return
        if not reply.succeeded:
            on_lost("the entry was gone when its held mark was written")

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        def on_events(events: list[Any], revision: int) -> None:
            if any(e.type == pb.Event.DELETE for e in events):
                on_lost("the entry was deleted (lease revoked or expired, or by hand)")

        # from our create_revision: a delete that already happened is seen too
        watcher = Watcher(
            self.client, self.entry_key(key), start_revision=token, on_events=on_events
        )
        with self._lock:
            self._holder_watchers[key] = watcher

    # ---- job slots: keys slots/<index> on the entry's lease ---------------------------
    def _slot_key(self, index: int) -> bytes:
        return self.slots_prefix + str(index).encode()

    def _slot_index(self, key: bytes) -> int | None:
        return parse_slot_index(key.decode(errors="replace"), self.slots_prefix.decode())

    def _slot_indices(self, kvs: Any) -> frozenset[int]:
        indices = (self._slot_index(kv.key) for kv in kvs)
        return frozenset(index for index in indices if index is not None)

    def list_slots(self, waiter: Waiter, deadline: Deadline) -> frozenset[int] | SessionLost:
        return self.backend.run(self._list_slots(deadline))

    async def list_slots_async(
        self, waiter: Waiter, deadline: Deadline
    ) -> frozenset[int] | SessionLost:
        return await self.backend.run_async(self._list_slots(deadline))

    def _list_slots(self, deadline: Deadline) -> Program[frozenset[int]]:
        reply = yield from self._call(
            lambda timeout: Call.txn([], [self._slots], [], timeout=timeout), deadline
        )
        return self._slot_indices(reply.responses[0].response_range.kvs)

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> int | frozenset[int] | SessionLost:
        return self.backend.run(self._take_slot(waiter, index, deadline))

    async def take_slot_async(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> int | frozenset[int] | SessionLost:
        return await self.backend.run_async(self._take_slot(waiter, index, deadline))

    def _take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> Program[int | frozenset[int] | SessionLost]:
        """One txn: if our entry still has its create_revision and the slot's key does
        not exist, put it on the entry's lease (its token: the txn's revision, its one
        write); else read both. Retried as is after UNAVAILABLE: a lost attempt that
        made the record shows it naming our entry, and it is adopted."""
        uid, token = waiter.key, waiter.token
        assert uid is not None and token is not None
        key, slot_key = self.entry_key(uid), self._slot_key(index)
        ours = encode_slot(uid, token)
        lease = parse_etcd_entry(uid)[0]
        self.slot_sending(uid, index)
        try:
            reply = yield from self._call(
                lambda timeout: Call.txn(
                    [
                        Compare.create_revision(key, "==", token),
                        Compare.create_revision(slot_key, "==", 0),
                    ],
                    [Op.put(slot_key, ours, lease=lease)],
                    [Op.range(key), self._slots],
                    timeout=timeout,
                ),
                deadline,
            )
        except EtcdLeaseNotFound:
            self.slot_answered(uid, index, None)
            return SessionLost()  # the lease is gone, our entry with it
        if reply.succeeded:
            self.slot_answered(uid, index, int(reply.header.revision))
            return int(reply.header.revision)
        entry = reply.responses[0].response_range.kvs
        if not entry or entry[0].create_revision != token:
            self.slot_answered(uid, index, None)
            return SessionLost()  # our entry is gone: enter the queue again
        kvs = reply.responses[1].response_range.kvs
        mine = [kv for kv in kvs if kv.key == slot_key and kv.value == ours]
        if mine:  # made by an attempt whose reply was lost
            log.info("create reply of slot %d of %r was lost; adopted it", index, self.name)
            self.slot_answered(uid, index, int(mine[0].create_revision))
            return int(mine[0].create_revision)
        self.slot_answered(uid, index, None)
        return self._slot_indices(kvs)

    # ---- leaving ------------------------------------------------------------------
    def remove(self, key: str) -> None:
        self.backend.run(self.delete_entry(key, self.leaving(key)))

    async def remove_async(self, key: str) -> None:
        # Its first attempt is bounded by the request timeout, then it goes on in the
        # background (delete_entry). Cancelling this task cancels the call, which may or may
        # not have been applied: the delete (guarded, so repeating it is harmless) is
        # sent again in the background.
        token = self.leaving(key)
        try:
            await self.backend.run_async(self.delete_entry(key, token))
        except asyncio.CancelledError:
            self.backend.spawn(self.delete_entry(key, token))
            raise

    def leaving(self, key: str) -> int | None:
        """Our entry ``key`` leaves: forget its mark and its token, end its holder's
        watch (first: our own delete is no loss to report). Its token, if known."""
        self.forget_mark(key)
        with self._lock:
            token = self._tokens.pop(key, None)
            self._marks_pending.discard((key, token))
            watcher = self._holder_watchers.pop(key, None)
        if watcher is not None:
            self._cancel([watcher])
        return token

    def abandon(self, waiter: Waiter) -> None:
        if waiter.key is not None:
            self.remove(waiter.key)
        elif waiter.entry_id is not None:
            # Its slot is not reused before this delete lands: only ever our entry. The
            # create, if it was sent, is over (SyncRunner holds interrupts until it returns).
            self.backend.run(self.delete_entry(waiter.entry_id, None))

    def abandon_nowait(self, waiter: Waiter) -> None:
        if waiter.key is not None:
            self.backend.spawn(self.delete_entry(waiter.key, self.leaving(waiter.key)))
        elif waiter.entry_id is not None:
            # A create still on its way when the acquire was cancelled: its undo waits
            # for its outcome first, else the delete could reach etcd before it.
            self.backend.undo_create(waiter.entry_id, self.delete_entry(waiter.entry_id, None))

    async def abandon_async(self, waiter: Waiter) -> None:
        if self.backend.closed:
            return  # the close revokes the lease: every entry goes with it
        if waiter.key is not None:
            await self.remove_async(waiter.key)
        elif waiter.entry_id is not None:
            # the undo of abandon_nowait (after the create's end), awaited within the
            # request timeout; it goes on in the background after that, or when this
            # task is cancelled
            undo = self.backend.undo_create(
                waiter.entry_id, self.delete_entry(waiter.entry_id, None)
            )
            if undo is not None:
                await asyncio.wait({undo}, timeout=self.request_timeout)

    def delete_entry(self, uid: str, token: int | None) -> Program[None]:
        """Delete our entry, guarded by its create_revision when known, and its job slot
        records in the same txn (each guarded by its own create_revision). Tries now; if
        etcd cannot be reached, retries in the background (the lease's end removes the
        entry anyway)."""
        key = self.entry_key(uid)
        records = self.slots_leaving(uid)
        slots = {self._slot_key(i): t for i, t in records.items() if t is not None}
        guard = [] if token is None else [Compare.create_revision(key, "==", token)]
        guard += [Compare.create_revision(k, "==", t) for k, t in slots.items()]
        delete = [Op.delete(key), *(Op.delete(k) for k in slots)]
        try:
            # release() returns within the request timeout, the background goes on after
            reply: Any = yield Call.txn(
                guard, delete, [], timeout=min(ATTEMPT_TIMEOUT, self.request_timeout)
            )
        except EtcdUnavailable:
            log.warning("delete of %r is pending until etcd is reachable again", uid)
            self.backend.spawn(self._delete_retried(uid, guard, delete))
            return
        except EtcdError as exc:
            log.warning("delete of %r failed: %s", uid, exc)
            return
        if slots and not reply.succeeded:
            # the entry or a record was gone already (its lease, or by hand): each alone,
            # the records first
            for slot_key, slot_token in slots.items():
                yield from self._delete_guarded(
                    [Compare.create_revision(slot_key, "==", slot_token)], slot_key
                )
            if token is not None:
                yield from self._delete_guarded([Compare.create_revision(key, "==", token)], key)
        if token is not None:
            # A record whose create was interrupted before its reply, if it names this
            # entry: after the entry's delete, which no later create of it can pass
            # (its txn compares the entry), so none appears after this.
            ours = encode_slot(uid, token)
            for index in (i for i, t in records.items() if t is None):
                slot_key = self._slot_key(index)
                yield from self._delete_guarded([Compare.value(slot_key, "==", ours)], slot_key)
        # Deleted, or already gone (the guard failed): the slot can serve again.
        self.backend.free_entry_slot(uid)

    def _delete_guarded(self, guard: list[Any], key: bytes) -> Program[None]:
        """One guarded delete of ``key``, now or (unreachable) in the background."""
        delete = [Op.delete(key)]
        try:
            yield Call.txn(guard, delete, [], timeout=min(ATTEMPT_TIMEOUT, self.request_timeout))
        except EtcdUnavailable:
            self.backend.spawn(self._delete_retried(None, guard, delete))
        except EtcdError as exc:
            log.warning("delete of %r failed: %s", key, exc)

    def _delete_retried(
        self, uid: str | None, guard: list[Any], delete: list[Any]
    ) -> Program[None]:
        if self._closed:
            return
        # gives up when the queue closes (or etcd refuses it): the lease's end removes
        # the entry then
        with contextlib.suppress(EtcdError):
            yield from retrying(
                lambda timeout: Call.txn(guard, delete, [], timeout=timeout),
                Deadline(None, time.monotonic),
                attempt_timeout=ATTEMPT_TIMEOUT,
                initial_backoff=0.2,
                max_backoff=0.2,
                stop=lambda: self._closed,
            )
            if uid is not None:
                self.backend.free_entry_slot(uid)

    # ---- reading and fencing --------------------------------------------------------
    def status(self) -> Status:
        return self.backend.run(self._status())

    async def status_async(self) -> Status:
        return await self.backend.run_async(self._status())

    def _status(self) -> Program[Status]:
        reply = yield from self._call(
            lambda timeout: Call.txn([], [*self._reads, self._slots], [], timeout=timeout)
        )
        config = reply.responses[1].response_range.kvs
        if not config:  # deleted, or the store lost its data: not the capacity we knew
            raise SemaphoreNotFound(self.name, f"etcd key {self.config_key.decode()}")
        capacity = decode_capacity(self.name, config[0].value)
        slots: dict[tuple[str, int | None], list[int]] = {}  # (entry, its token) -> slots
        for kv in reply.responses[2].response_range.kvs:
            index = self._slot_index(kv.key)
            if index is not None:
                slots.setdefault(decode_slot(kv.key.decode(), kv.value), []).append(index)
        rows = []
        for kv in reply.responses[0].response_range.kvs:
            uid, weight, data = self._decode(kv)
            held = tuple(sorted(slots.get((uid, kv.create_revision), ())))
            rows.append(
                (
                    kv.create_revision,
                    EntryStatus(
                        uid, data.owner, weight, kv.create_revision, data.held, data.since, held
                    ),
                )
            )
        rows.sort(key=lambda r: r[0])
        return split_queue(self.name, capacity, (r[1] for r in rows))

    def transaction(self, key: str, token: int) -> EtcdFencedTransaction:
        """Fenced by the permit's own token: once released, its key may serve a newer
        entry of this backend, which must not let the old permit's writes through."""
        return EtcdFencedTransaction(self, self.entry_key(key), token)

    def close(self, deadline: Deadline) -> None:
        self._closed = True
        watchers = [] if self._capacity_watch is None else [self._capacity_watch]
        with self._lock:
            watchers += [w for ws in self._watchers.values() for w in ws.values()]
            watchers += self._holder_watchers.values()
            self._watchers.clear()
            self._holder_watchers.clear()
        for watcher in watchers:
            watcher.cancel(timeout=deadline.cap(1.0))


class EtcdFencedTransaction(FencedTransaction):
    """An etcd txn that commits only while the permit's entry still has its
    create_revision (the fencing token). The writes' conditions (created keys absent,
    set and deleted keys present) are compared beside the fence, in the one top-level
    txn (etcd 3.4 does not check permissions inside nested txns); when a compare fails,
    the failure branch reads the keys back to tell PermitLost from WriteConflict."""

    def __init__(
        self, queue: EtcdQueue, entry_key: bytes, token: int, others: Sequence[bytes] = ()
    ) -> None:
        """``others``: more entry keys of the same token that fence it (a multi-permit's)."""
        super().__init__()
        self._queue = queue
        self.entry_key = entry_key
        self.token = token
        self._fences = [entry_key, *others]

    def commit(self) -> None:
        """One attempt, bounded by the request timeout (a txn of yours is not retried:
        it need not be idempotent). BackendUnavailable when it fails or times out: the
        txn may still have been applied then, so read back before committing again."""
        self._queue.backend.run(self._commit())

    async def commit_async(self) -> None:
        """:meth:`commit`, awaited. Cancelling the awaiting task does not un-send the
        txn: it may still be applied (read back before committing again)."""
        await self._queue.backend.run_async(self._commit())

    def _commit(self) -> Program[None]:
        compare = [Compare.create_revision(fence, "==", self.token) for fence in self._fences]
        ops = []
        for write in self.writes:
            key = write.key.encode()
            absent = write.kind is WriteKind.CREATE
            compare.append(Compare.create_revision(key, "==" if absent else ">", 0))
            if write.kind is WriteKind.DELETE:
                ops.append(Op.delete(key))
            else:
                ops.append(Op.put(key, write.value))
        reads = [
            *(Op.range(f) for f in self._fences),
            *(Op.range(w.key.encode()) for w in self.writes),
        ]
        queue = self._queue
        timeout = queue.request_timeout
        try:
            reply: Any = yield Call.txn(compare, ops, reads, timeout=timeout)
        except EtcdUnavailable as exc:
            raise BackendUnavailable(
                f"etcd unreachable (request timeout {timeout:g} s): {exc}; the transaction "
                "may have been applied"
            ) from exc
        except EtcdAuthError as exc:
            keys = [self.entry_key.decode(errors="replace"), *(w.key for w in self.writes)]
            raise queue.backend.permission_denied("keys " + ", ".join(keys), exc) from exc
        except EtcdError as exc:
            raise BackendUnavailable(f"etcd refused the transaction: {exc}") from exc
        if reply.succeeded:
            return
        read = [r.response_range.kvs for r in reply.responses]
        fences, found = read[: len(self._fences)], read[len(self._fences) :]
        for fence, entry in zip(self._fences, fences, strict=True):
            if not entry or entry[0].create_revision != self.token:
                raise PermitLost(
                    f"fence failed: the permit's entry {fence.decode()} "
                    f"(token {self.token}) is gone"
                )
        for write, kvs in zip(self.writes, found, strict=True):
            if bool(kvs) == (write.kind is WriteKind.CREATE):
                raise WriteConflict(write.key, "it exists" if kvs else "it does not exist")
        raise WriteConflict(self.writes[0].key, "a condition failed")  # (changed meanwhile)
