"""The protocol steps in ZooKeeper: enqueue, arm, relist, and the held mark.

Every request here is sent with kazoo's async API so that requests of one step go out
back to back: ZooKeeper answers one session's requests in order, so the create and the
child listing of an enqueue cost one round trip. A client that cycles alone skips the
listing (one request per acquire, like a raw create): see ``_alone_since`` below and
docs/design.md section 9.

Connection loss: a step waits for the connection to come back (within the acquire's
deadline) and goes on; a create whose reply was lost is looked for by its entry id
before creating again. Session expiry: the entries die with the session; a waiter
enters the queue again with kazoo's new session (see ``backend.py``).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType

from .._core.codec import EntryData, decode_entry
from .._core.deadline import Deadline
from .._core.names import new_entry_id, parse_zk_entry, zk_entry_prefix
from .._core.protocol import Enqueued, EntryChanged, EntryHeld, SessionLost
from .._core.queue import Entry, EntryState
from ..backend import Waiter, nearest_needed
from ..errors import CorruptState
from ._kazoo_compat import run_on_callback_thread
from ._known_queue import KnownQueue
from ._listing import Listings, nearest_lower, sorted_entries
from ._waits import Await, ZkProgram
from .node import SemaphoreNode, session_ended

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

log = logging.getLogger("semaphore_recipes.zookeeper")


class ProtocolSteps(SemaphoreNode):
    """Enqueue, arm, relist, the held mark and the permit's entry watch."""

    def __init__(self, backend: ZooKeeperBackend, name: str) -> None:
        super().__init__(backend, name)
        # Sequence number of our last entry that was alone in the queue (every entry
        # older than it gone) and has been deleted; None: unknown. See _enqueue_alone.
        self._alone_since: int | None = None
        self._alone: dict[str, int] = {}  # our live entries known alone -> their sequence
        self._marks_pending: set[str] = set()  # held marks handed to kazoo's callback thread
        # our held entries whose holder is told of a revoke request: key -> tell
        self._revocation_watches: dict[str, Callable[[], None]] = {}
        self._revoked: set[str] = set()  # requests seen (kept by a held mark written later)
        self._listings = Listings()  # one listing for the enqueues of a burst (_listing.py)
        self._known = KnownQueue()  # what a re-list is answered from (_known_queue.py)

    def forget_old_session(self) -> None:
        """Our entries died with the old session; lost permits are never released, so
        drop what we kept about them here."""
        with self._lock:
            self._alone.clear()
            self._marks_pending.clear()
            self._revocation_watches.clear()
            self._revoked.clear()

    def forget_entry(self, key: str) -> int | None:
        """Our entry ``key`` leaves: drop its pending held mark and what the lone-client
        path kept of it (its sequence number, returned)."""
        with self._lock:
            self._marks_pending.discard(key)
            self._revocation_watches.pop(key, None)
            self._revoked.discard(key)
            return self._alone.pop(key, None)

    def left_alone(self, sequence: int) -> None:
        """Our entry of ``sequence``, alone in the queue, is deleted (its reply in hand):
        the next enqueue may skip its listing (see :meth:`_enqueue_alone`)."""
        with self._lock:
            self._alone_since = sequence

    def entry_gone(self, key: str) -> None:
        """Our entry ``key`` is deleted (the reply in hand): a re-list leaves it out."""
        self._known.gone(key)

    # ---- the protocol steps ---------------------------------------------------
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> ZkProgram[Enqueued]:
        yield self.step_waits(deadline)
        waiter.new_generation()
        while True:
            yield from self.until_connected()
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
                self._known.listed(parent, entries)
            except NoNodeError:
                log.warning("semaphore node %s vanished; creating it again", self.path)
                yield from self.recreate_node()
                continue
            except ConnectionLoss:
                # The create may or may not have happened: look for our id before
                # creating again, so no orphan entry blocks the queue.
                found = yield from self._find_after_lost_reply(waiter)
                if found is None:
                    continue
                path, stat, children, parent = found
                entries = sorted_entries(children)
                self._known.listed(parent, entries)
            except SessionExpiredError:
                continue  # a create in the dead session died with it; kazoo makes a new one
            if not (yield from self.capacity_checked(parent.mzxid)):
                continue  # the session ended meanwhile: that entry is gone with it
            if self.backend.session_id != session:
                continue  # raced a session change: that entry is gone with its session
            return self.enqueued(waiter, path, stat.czxid, entries)

    def _list(self) -> Any:
        return self.client.get_children_async(self.path, include_data=True)

    def _enqueue_alone(
        self, waiter: Waiter, path: str, czxid: int, alone_since: int | None, session: int | None
    ) -> Enqueued | None:
        """The one-request enqueue of a client cycling alone, or None: list after all.

        Our previous entry (sequence ``alone_since``) was at some moment the only entry,
        and we deleted it before this create. Every create in the queue takes the next
        sequence number of the parent, so if ours is ``alone_since + 1`` nobody created
        an entry in between: no entry can be lower than ours. A capacity change made
        before our create would have reached us before its reply (capacity_current).
        """
        node = path.rsplit("/", 1)[1]
        parsed = parse_zk_entry(node)
        assert parsed is not None and alone_since is not None
        seq = parsed[2]
        if (
            seq != alone_since + 1
            or self.backend.session_id != session
            or not self.capacity_current()
            or waiter.weight > self.capacity
        ):
            return None
        with self._lock:
            self._alone[node] = seq
        waiter.created(node, czxid)
        me = Entry(key=node, order=seq, weight=waiter.weight)
        capacity, version = self.capacity_answer()
        return Enqueued(me, (), capacity, later_entries=False, capacity_version=version)

    def enqueued(
        self, waiter: Waiter, path: str, czxid: int, entries: list[tuple[int, int, str]]
    ) -> Enqueued:
        """The answer for our entry created at ``path``, from the listing ``entries``."""
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
            yield from self.until_connected()
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

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> ZkProgram[Mapping[str, EntryState | None] | SessionLost]:
        yield self.step_waits(deadline)
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
                        if data.held and data.lower is not None:
                            self._known.held_with(key, data.lower)
                    except NoNodeError:
                        # (a get on a missing node leaves no watch behind)
                        states[key] = None
                        self._known.found_gone(key)
                return states
            except ConnectionLoss:
                yield Await.CONNECTION
            except SessionExpiredError:
                return SessionLost()

    def confirm(self, waiter: Waiter, deadline: Deadline) -> ZkProgram[bool]:
        """Our entry exists, read after a ``sync`` (a follower has applied what the
        leader did: an expired session's nodes deleted). An expired session is refused;
        a new one does not own the node."""
        yield self.step_waits(deadline)
        assert waiter.key is not None
        while True:
            try:
                yield self.client.sync_async(self.path)
                stat = yield self.client.exists_async(f"{self.path}/{waiter.key}")
                return stat is not None
            except ConnectionLoss:
                yield Await.CONNECTION
            except SessionExpiredError:
                return False

    def known_lower(self, waiter: Waiter) -> list[Entry] | None:
        """Every entry lower than ours that may exist, from what this process knows of
        the queue when that holds our entry (``_known_queue.py``); else None: list."""
        assert waiter.key is not None
        return self._known.lower_than(waiter.key, self._sequence(waiter.key))

    @staticmethod
    def _sequence(key: str) -> int:
        parsed = parse_zk_entry(key)
        assert parsed is not None
        return parsed[2]

    def relist(self, waiter: Waiter, deadline: Deadline) -> ZkProgram[list[Entry] | SessionLost]:
        """Every entry lower than ours, from a listing of the children."""
        yield self.step_waits(deadline)
        assert waiter.key is not None
        my_seq = self._sequence(waiter.key)
        while True:
            try:
                children, parent = yield self._list()
                break
            except ConnectionLoss:
                yield Await.CONNECTION
            except SessionExpiredError:
                return SessionLost()
        entries = sorted_entries(children)
        self._known.listed(parent, entries)
        below = bisect.bisect_left(entries, (my_seq,))
        return [Entry(key=name, order=seq, weight=w) for seq, w, name in entries[:below]]

    def _entry_watch(self, waiter: Waiter, generation: int, key: str) -> Callable[[Any], None]:
        def fired(event: Any) -> None:
            if event.type == EventType.DELETED:
                self._known.gone(key)
                waiter.entry_deleted(generation, key)
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
        never re-creates an entry that is gone. It is written over the version read (0:
        the entry's first write), so a revoke request written before it is read and kept
        in the mark, never overwritten (``revocation.py``)."""
        path = f"{self.path}/{key}"
        data = b""
        version = 0

        with self._lock:
            self._marks_pending.add(key)

        def marked(result: Any) -> None:
            try:
                result.get(block=False)
            except NoNodeError:
                on_lost("the entry was gone when its held mark was written")
            except SessionExpiredError:
                on_lost("the session expired before the held mark was written")
            except BadVersionError:  # a revoke request came first (or our lost reply)
                self.client.get_async(path).rawlink(reread)
            except ConnectionLoss:
                if not self.backend.closed:  # sent on reconnect
                    self.client.set_async(path, data, version=version).rawlink(marked)
            except KazooException as exc:
                log.warning("held mark of %s failed: %r", path, exc)

        def reread(result: Any) -> None:
            nonlocal data, version
            try:
                raw, stat = result.get(block=False)
                asked = decode_entry(key, raw).revoke
            except NoNodeError:
                on_lost("the entry was gone when its held mark was written")
                return
            except (KazooException, CorruptState) as exc:
                log.warning("held mark of %s failed: %r", path, exc)
                return
            if raw == data:
                return  # our own mark, its reply lost
            data, version = dataclasses.replace(mark, revoke=asked).encode(), stat.version
            self.client.set_async(path, data, version=version).rawlink(marked)

        def send() -> None:
            nonlocal data
            with self._lock:
                if key not in self._marks_pending:
                    return  # released (or abandoned) already
                self._marks_pending.discard(key)
                asked = key in self._revoked
            data = (dataclasses.replace(mark, revoke=True) if asked else mark).encode()
            self.client.set_async(path, data, version=version).rawlink(marked)

        run_on_callback_thread(self.client, send)

    def watch_revocation(self, key: str, token: int, on_revoke: Callable[[], None]) -> None:
        """Told by the holder's entry watch (``watch_entry``), whose reads return the
        entry's data: a request written before it is in the first read."""
        with self._lock:
            self._revocation_watches[key] = on_revoke

    def _revoke_seen(self, key: str) -> None:
        with self._lock:
            self._revoked.add(key)
            on_revoke = self._revocation_watches.pop(key, None)
        if on_revoke is not None:
            on_revoke()

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        path = f"{self.path}/{key}"

        def fired(event: Any) -> None:
            if event.type == EventType.DELETED:
                on_lost("the entry was deleted")
            elif event.type == EventType.CHANGED or (
                # our own held mark, a revoke request, or the connection lost (kazoo
                # dropped the watch): read and watch on (sent once connected); a session
                # end is the permit's business
                event.type == EventType.NONE and not session_ended(event)
            ):
                self.client.get_async(path, watch=fired).rawlink(read)

        def read(result: Any) -> None:
            try:
                raw, _ = result.get(block=False)
            except NoNodeError:
                on_lost("the entry was gone when its watch was set")
                return
            except KazooException:
                return
            with contextlib.suppress(CorruptState):
                if decode_entry(key, raw).revoke:
                    self._revoke_seen(key)

        self.client.get_async(path, watch=fired).rawlink(read)
