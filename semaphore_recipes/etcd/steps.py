"""The protocol steps in etcd: enqueue, arm, relist, the held mark, and closing.

The enqueue is one txn: create-if-absent of our key plus a range of the entries and of
the config, so it is one round trip and the listing is atomic with the create (no
later entry can exist in it). That range stops after ``nearest_needed`` entries: a
short queue is listed whole in the one round trip; a longer one's nearest entries below
ours are read next, outside the txn, by a read shared with the waiters enqueuing at the
same time (docs/design.md section 2, "Truncated views"); once a queue was found long,
its next enqueues leave the range out of the txn (etcd reads it in its apply loop,
walking the whole range) and read outside it only; so do the enqueues that find as many
of this process's creates on this queue on their way as the range would list (a burst:
the queue will be long, and their txns would all be built before any reply said so).
A retried enqueue after a lost reply takes the failure branch, which reads its key: the
entry made by the lost attempt is adopted, and its nearest entries are read outside
the txn (a listing there would be read in etcd's apply loop, whole).

Connection loss: a step retries UNAVAILABLE within the acquire's deadline, then
AcquireTimeout. Lease expiry: every waiter enqueues again on the new lease; an enqueue
that finds its lease replaced while its txn was on its way deletes the entry it created
(by its create_revision) before trying again.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._core.codec import EntryData, decode_entry
from .._core.deadline import Deadline
from .._core.names import parse_etcd_entry
from .._core.program import Program
from .._core.protocol import Enqueued, SessionLost
from .._core.queue import Entry, EntryState, nearest_needed
from ..backend import Waiter
from ..errors import AcquireTimeout, CorruptState, PermissionDenied
from ._proto import etcd_api_pb2 as pb
from .entry_watch import EntryWatch
from .errors import EtcdError, EtcdLeaseNotFound, EtcdUnavailable
from .keyspace import ATTEMPT_TIMEOUT, create_within
from .leaving import Leaving
from .ops import Compare, Op
from .retry import retrying
from .rpc import AwaitCreated, Call
from .turns import AwaitTurn, Turns
from .watch import Watcher

if TYPE_CHECKING:
    from .backend import EtcdBackend

log = logging.getLogger("semaphore_recipes.etcd")

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


class ProtocolSteps(Leaving):
    """Enqueue, arm, relist, the held mark and the holder's watch; closing the queue."""

    def __init__(self, backend: EtcdBackend, name: str) -> None:
        super().__init__(backend, name)
        self._watchers: dict[Waiter, dict[str, Watcher]] = {}
        # watches that fired, to cancel on the waiter's own thread or task (``_watch``)
        self._fired: dict[Waiter, list[Watcher]] = {}
        self._listed: dict[tuple[bytes, int], Entry] = {}  # decoded entries of the last listing
        # the shared read of the entries below new waiters (``nearest_below``)
        self._below_waiting: set[int] = set()  # tokens of the waiters needing theirs
        self._below_reading = False
        self._below_turns = Turns(self._lock)  # a turn ends with each read
        self._below_last: SharedRead | None = None
        # the last listing of this queue found more entries than an enqueue's txn lists:
        # the next enqueues leave that range out of their txn (see ``enqueue``)
        self._queue_long = False
        self._creating = 0  # enqueue txns of this queue on their way (``enqueue``)

    # ---- waiters ---------------------------------------------------------------
    def unregister(self, waiter: Waiter) -> None:
        super().unregister(waiter)
        self.drop_watchers(waiter)

    def drop_watchers(self, waiter: Waiter) -> None:
        """End the watches armed for ``waiter`` (its acquire is over, or enqueues again)."""
        with self._lock:
            watchers = [*self._watchers.pop(waiter, {}).values(), *self._fired.pop(waiter, ())]
        self.cancel_watchers(watchers)

    def cancel_fired(self, waiter: Waiter) -> None:
        """End the watches of ``waiter`` that fired since its last look (``_watch``)."""
        with self._lock:
            fired = self._fired.pop(waiter, ())
        self.cancel_watchers(fired)

    # ---- the protocol steps ------------------------------------------------------
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        self.drop_watchers(waiter)
        while True:
            # A generation per attempt: the end of the lease an attempt gave up on may
            # still be reported to it; the next attempt must not take that for its own.
            waiter.new_generation()
            lease = yield from self.backend.lease(deadline)
            uid = self.backend.take_entry_slot(lease)
            waiter.creating(uid)  # (drops a view kept for the key's previous entry)
            key = self.entry_key(uid)
            value = EntryData(
                owner=waiter.owner, held=False, since=time.time(), weight=waiter.weight
            ).encode()
            # The listing in the txn is cut at ``nearest`` entries in key order (the
            # server reads only those): the whole queue when it is short. A longer
            # queue's nearest entries are read next, outside the write (see below).
            nearest = nearest_needed(self.capacity) + 1  # + 1: ours
            # Behind a queue known to be long the range is left out: the nearest entries
            # are read outside the txn anyway, and a write's range is read by etcd's
            # apply loop, which lease renewals wait for, walking every key of the range
            # to count it however small its limit (W = 100,000 starved the leases).
            # So does a burst: with ``nearest`` creates of ours on their way the queue will
            # be long, and the burst's txns are all built before any reply tells it
            # (tens of thousands of tasks at once each put a range in their txn: the apply
            # fell behind by more than lease renewals wait for it, and the leases ended).
            with self._lock:
                long = self._queue_long or self._creating >= nearest
                self._creating += 1
            request = self.entry_creates.request(key, value, lease, 0 if long else nearest)
            try:
                # Retried as is after UNAVAILABLE: if the lost attempt created the key,
                # the failure branch reads it and we adopt it (no orphan, no second
                # entry); its nearest entries are read next, as behind a long queue. (Not
                # a listing of the entries in that branch: etcd reads it in its apply
                # loop, and the retries at the end of a long burst, each listing the
                # whole queue, held the apply until the lease renewals failed.)
                # ``creates``: the asyncio face lets it finish even when the acquire is
                # cancelled, so the undo never overtakes it (gRPC does not order calls).
                # The sync face holds an interrupt until the txn returns (SyncRunner).
                create: Callable[[float], Call] = functools.partial(create_within, request, uid)
                try:
                    reply = yield from self.call(create, deadline)
                finally:
                    with self._lock:
                        self._creating -= 1
            except EtcdLeaseNotFound:
                self.backend.lease_gone(lease)
                continue  # refused: nothing was created
            except PermissionDenied:
                # a refused txn wrote nothing: no entry to clean up
                waiter.creating(None)
                self.backend.free_entry_slot(uid)
                raise
            listed = None
            if reply.succeeded:
                if not long:
                    listed = reply.responses[1].response_range
                # our put is the txn's one write: created at the txn's revision
                token, entry_lease = int(reply.header.revision), lease
            else:
                mine = reply.responses[0].response_range.kvs  # our key, made by a lost try
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
            if listed is not None and not listed.more:
                self._queue_long = False
                return self.enqueued(waiter, uid, token, listed.kvs, complete=True, later=None)
            # A long queue: its nearest entries below ours, newest first. etcd reads
            # every entry to sort them, so this is a read of its own, not part of the
            # write: inside it, each enqueue held up etcd's apply (and the lease
            # renewals that wait for it) for as long as the queue is long. Read after
            # our create, it may miss entries deleted meanwhile (entries only leave:
            # still a superset of the lower set), but successors may have seen them:
            # they may need our held mark (``later_entries``).
            waiter.created(uid, token)  # an error or a cancel below: the entry is undone
            below, complete = yield from self.nearest_below(token, nearest - 1, deadline)
            # (fewer below us than the txn would list: the next enqueue lists in its txn)
            self._queue_long = not complete or len(below) >= nearest - 1
            return self.enqueued(waiter, uid, token, below, complete, later=True)

    def nearest_below(
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
                    wait = deadline.cap(_SHARED_READ_WAIT)
                    yield AwaitTurn(self._below_turns, turn, wait, place=token)
                    continue
                last: SharedRead | None = None
                try:
                    # entries created between ``token`` and ``top`` are at most
                    # ``top - token``: the limit leaves ``count`` below every token read for
                    reply = yield from self.call(
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
                    # those it served, and the next to read (all of them if it failed)
                    self._below_turns.wake(None if last is None else top)
        except BaseException:
            self._below_turns.pass_on()  # (it may have been woken to read next)
            raise
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
        self.entry_created(uid, token)
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

    def _entry(self, kv: Any) -> Entry:
        uid, weight, data = self.decode_listed(kv)
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
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        self.cancel_fired(waiter)
        generation = waiter.generation
        token = waiter.token
        assert token is not None
        # Watched from now, then read once the server has confirmed the watches: one
        # from the read's revision would be past already under contention, and etcd
        # serves those from a loop every 100 ms (``entry_watch``).
        watches = {key: self._watch(waiter, generation, key) for key in keys}
        yield AwaitCreated(
            tuple(watcher for _, watcher in watches.values()), deadline.cap(ATTEMPT_TIMEOUT)
        )
        read_at, found = yield from self._read_entries(keys, token, deadline)
        states: dict[str, EntryState | None] = {}
        for key, kv in zip(keys, found, strict=True):
            entry_watch, watcher = watches[key]
            if kv is None:
                states[key] = None
                self._unwatch(waiter, key, watcher)
                continue
            data = decode_entry(key, kv.value)
            states[key] = EntryState(held=data.held, lower=data.lower)
            created_at = watcher.created_revision
            entry_watch.open(kv.create_revision, read_at, created_at)
            if created_at is None:  # (called at once if confirmed since)
                watcher.when_created(functools.partial(_confirmed_late, entry_watch, watcher))
        return states

    def peek(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        """One txn of reads, no watch: a head's first look at a view that is mostly
        gone under contention (``Capabilities.peek_before_arming``)."""
        token = waiter.token
        assert token is not None
        _, found = yield from self._read_entries(keys, token, deadline)
        states: dict[str, EntryState | None] = {}
        for key, kv in zip(keys, found, strict=True):
            if kv is None:
                states[key] = None
                continue
            data = decode_entry(key, kv.value)
            states[key] = EntryState(held=data.held, lower=data.lower)
        return states

    def _read_entries(
        self, keys: tuple[str, ...], token: int, deadline: Deadline
    ) -> Program[tuple[int, list[Any | None]]]:
        """The revision of one txn reading ``keys``, and each key's kv; None for an
        entry gone, its key maybe reused by an entry created after ours (the base then
        answers a view kept under the key, its own or a newer entry's, whose view holds
        every live entry below ours too)."""
        reads = [Op.range(self.entry_key(k)) for k in keys]
        reply = yield from self.call(
            lambda timeout: Call.txn([], reads, [], timeout=timeout), deadline
        )
        found: list[Any | None] = []
        for response in reply.responses:
            kvs = response.response_range.kvs
            found.append(kvs[0] if kvs and kvs[0].create_revision < token else None)
        return int(reply.header.revision), found

    def confirm(self, waiter: Waiter, deadline: Deadline) -> Program[bool]:
        """Our entry's key, read (linearizable): its lease's end takes it. A key made
        again since is a newer entry's: its create revision is not our token."""
        key, token = waiter.key, waiter.token
        assert key is not None and token is not None
        reply = yield from self.call(
            lambda timeout: Call.range(self.entry_key(key), keys_only=True, timeout=timeout),
            deadline,
        )
        return bool(reply.kvs) and int(reply.kvs[0].create_revision) == token

    def relist(self, waiter: Waiter, deadline: Deadline) -> Program[list[Entry] | SessionLost]:
        token = waiter.token
        assert token is not None
        reply = yield from self.call(
            lambda timeout: Call.range(
                self.entries_prefix,
                self.entries_end,
                max_create_revision=token - 1,
                timeout=timeout,
            ),
            deadline,
        )
        return self._entries(reply.kvs)

    def _watch(self, waiter: Waiter, generation: int, key: str) -> tuple[EntryWatch, Watcher]:
        """A watch on one entry from now, its events held back until the arm's read is
        in (:class:`~.entry_watch.EntryWatch`). A held mark's event carries the mark, so
        the waiter is handed it and the watch stays (no read, no new watch); any other
        event ends it."""

        def fired(key: str) -> None:
            # Cancelled by the waiter's own thread or task, at its next arm or when its
            # attempt ends (``drop_watchers``), not here: the reader thread sending the
            # cancel held the GIL the waiter it had just woken was waiting for (a sync
            # handoff's wake took 40-55 us longer). It stays known meanwhile: no more
            # of them than the waiter had armed at once.
            with self._lock:
                watcher = self._watchers.get(waiter, {}).pop(key, None)
                if watcher is not None:
                    self._fired.setdefault(waiter, []).append(watcher)

        entry_watch = EntryWatch(waiter, generation, key, fired)
        watcher = Watcher(
            self.client,
            self.entry_key(key),
            start_revision=0,
            on_events=entry_watch.on_events,
            on_error=entry_watch.on_error,
        )
        with self._lock:
            old = self._watchers.setdefault(waiter, {}).pop(key, None)
            self._watchers[waiter][key] = watcher
        if old is not None:
            self.cancel_watchers([old])
        return entry_watch, watcher

    def _unwatch(self, waiter: Waiter, key: str, watcher: Watcher) -> None:
        """End the watch of an entry found gone by the arm's read."""
        with self._lock:
            if self._watchers.get(waiter, {}).get(key) is watcher:
                del self._watchers[waiter][key]
        self.cancel_watchers([watcher])

    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        """Sent without waiting (in the background: a pool thread, or a task of the
        loop). Guarded by our create_revision, so a mark can never re-create an entry
        that is gone; the put keeps the entry's own lease. A mark still waiting for its
        turn when the permit is released is not sent at all."""
        self.mark_pending(key, token)  # by token too: a released entry's slot may be reused
        self.backend.spawn(self._write_mark(key, token, mark, on_lost))

    def _write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> Program[None]:
        lease, _ = parse_etcd_entry(key)  # the entry's own lease, whatever the current one
        if not self.mark_still_pending(key, token):
            return  # released (or abandoned) already
        if self.revoked(key, token):  # a request seen before the mark: kept in it
            mark = dataclasses.replace(mark, revoke=True)
        value = mark.encode()  # by the background: not on acquire's path
        if self.closed:
            return
        guard = [Compare.create_revision(self.entry_key(key), "==", token)]
        put = [Op.put(self.entry_key(key), value, lease=lease)]
        try:
            reply = yield from retrying(
                lambda timeout: Call.txn(guard, put, [], timeout=timeout),
                Deadline(None, time.monotonic),
                attempt_timeout=ATTEMPT_TIMEOUT,
                stop=lambda: self.closed,
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
                return
            # a write of the entry: its held mark, or a revoke request (revocation.py)
            with contextlib.suppress(CorruptState):
                if any(decode_entry(key, e.kv.value).revoke for e in events):
                    self.revoke_seen(key, token)

        # from our create_revision: a delete that already happened is seen too
        watcher = Watcher(
            self.client, self.entry_key(key), start_revision=token, on_events=on_events
        )
        self.holder_watching(key, watcher)

    def close(self, deadline: Deadline) -> None:
        watchers = self.closing()
        with self._lock:
            watchers += [w for ws in self._watchers.values() for w in ws.values()]
            watchers += [w for ws in self._fired.values() for w in ws]
            self._watchers.clear()
            self._fired.clear()
        watchers += self.drop_holder_watchers()
        for watcher in watchers:
            watcher.cancel(timeout=deadline.cap(1.0))


def _confirmed_late(entry_watch: EntryWatch, watcher: Watcher) -> None:
    """A watch confirmed after its arm's read: changes in between may be unseen."""
    entry_watch.confirmed_late(watcher.created_revision or 0)
