"""One semaphore's queue in ZooKeeper: the kazoo side of the protocol steps.

Every request here is sent with kazoo's async API so that requests of one step go out
back to back: ZooKeeper answers one session's requests in order, so the create and the
child listing of an enqueue cost one round trip. The capacity is read again only when
the listing's parent stat shows that it changed.

A client that cycles alone skips the listing (one request per acquire, like a raw
create): see ``_alone_since`` below and docs/design.md section 9.

Bounds: the protocol steps wait within the acquire's deadline; every other call
(opening, status, set_capacity, a fenced commit, release) waits at most the backend's
request timeout for kazoo's replies, then raises BackendUnavailable (release logs and
goes on in the background instead).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

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
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KeeperState

from .._core.codec import EntryData, decode_capacity, decode_entry, encode_capacity
from .._core.deadline import Deadline
from .._core.names import (
    join_path,
    new_entry_id,
    parse_zk_entry,
    validate_capacity,
    zk_entry_prefix,
)
from .._core.protocol import Enqueued, EntryChanged, EntryDeleted, EntryHeld, SessionLost
from .._core.queue import Entry, EntryState
from .._core.status import EntryStatus, Status, split_queue
from ..backend import FencedTransaction, QueueDriver, Waiter, WriteKind
from ..errors import (
    AcquireTimeout,
    BackendUnavailable,
    CapacityMismatch,
    PermitLost,
    SemaphoreNotFound,
    WriteConflict,
)
from . import _kazoo_compat

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

log = logging.getLogger("semaphore_recipes.zookeeper")

T = TypeVar("T")


class ZooKeeperQueue(QueueDriver):
    mark_records_weight = False  # an entry's name carries its weight

    backend: ZooKeeperBackend

    def __init__(
        self,
        backend: ZooKeeperBackend,
        name: str,
        capacity: int | None,
        *,
        adopt_capacity: bool,
        create: bool = True,
    ) -> None:
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
        self.capacity = self._agree_capacity(capacity, adopt_capacity, create)
        backend.register_queue(self)

    # ---- capacity -------------------------------------------------------------
    def _agree_capacity(self, capacity: int | None, adopt: bool, create: bool) -> int:
        """Create the node if ``create`` and it is missing, then read (and watch) the
        stored capacity; without ``create`` nothing is written."""

        def agree(deadline: Deadline) -> tuple[bool, bytes, Any]:
            created = False
            if create:
                assert capacity is not None
                with contextlib.suppress(NodeExistsError):
                    self._answer(
                        self.client.create_async(
                            self.path, encode_capacity(capacity), makepath=True
                        ),
                        deadline,
                    )
                    created = True
            # one watch per process on the capacity: a change wakes our waiters (read
            # after the create: a create with makepath may first create the parents)
            try:
                raw, stat = self._answer(
                    self.client.get_async(self.path, watch=self._capacity_event), deadline
                )
            except NoNodeError:
                if create:
                    raise
                where = f"ZooKeeper node {(self.client.chroot or '') + self.path}"
                raise SemaphoreNotFound(self.name, where) from None
            return created, raw, stat

        created, raw, stat = self._bounded(agree, f"opening {self.path}")
        if created:
            log.info("created semaphore %r with capacity %d", self.name, capacity)
        stored = decode_capacity(self.name, raw)
        self._capacity_version = stat.mzxid
        self._capacity_settled = True
        if capacity is not None and stored != capacity and not adopt:
            raise CapacityMismatch(self.name, capacity, stored)
        return stored

    def _bounded(self, attempt: Callable[[Deadline], T], what: str) -> T:
        return self.backend.bounded(attempt, what, self.path)

    def _answer(self, reply: Any, deadline: Deadline) -> Any:
        return self.backend.answer(reply, deadline, f"semaphore {self.name!r}")

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
        except Exception as exc:  # CorruptState or a connection error: keep the old value
            log.error("semaphore %r: cannot read the new capacity: %s", self.name, exc)
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

        def write(deadline: Deadline) -> Any:
            try:
                return self._answer(
                    self.client.set_async(self.path, encode_capacity(capacity)), deadline
                )
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self._answer(
                        self.client.create_async(
                            self.path, encode_capacity(capacity), makepath=True
                        ),
                        deadline,
                    )
                return self._answer(self.client.exists_async(self.path), deadline)

        stat = self._bounded(write, f"writing {self.path}")
        log.info("semaphore %r: capacity set to %d", self.name, capacity)
        self.apply_capacity(capacity, stat.mzxid)

    def _result(self, async_result: Any, deadline: Deadline) -> Any:
        try:
            while True:
                try:
                    return async_result.get(block=True, timeout=deadline.remaining())
                except KazooTimeoutError:
                    # kazoo gives up when its one wait returns without a value, which
                    # may be a moment before our clock says the deadline passed
                    if deadline.expired():
                        raise AcquireTimeout(
                            f"semaphore {self.name!r}: no answer from ZooKeeper in time"
                        ) from None
        except ConnectionClosedError as exc:
            if _kazoo_compat.interrupted_request(exc, self.client):
                # kazoo swallowed a KeyboardInterrupt (the request may still be sent):
                # give the caller its interrupt back; the cleanup finds any entry by its id
                _kazoo_compat.wake_connection_thread(self.client)  # else requests lag behind
                raise KeyboardInterrupt("interrupted while kazoo was sending a request") from exc
            raise BackendUnavailable("the ZooKeeper client was closed") from exc
        except NoAuthError as exc:
            # every request of a step is on the semaphore's node or its entries
            raise self.backend.permission_denied(self.path, exc) from exc
        except (KazooException, AcquireTimeout):
            raise
        except Exception as exc:  # kazoo's own failure, e.g. its connection loop dying
            raise BackendUnavailable(f"the ZooKeeper client failed: {exc!r}") from exc

    # ---- the protocol steps ---------------------------------------------------
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Enqueued:
        waiter.new_generation()
        while True:
            self.backend.wait_connected(deadline)
            entry_id = new_entry_id()
            waiter.creating(entry_id)
            prefix = f"{self.path}/{zk_entry_prefix(entry_id, waiter.weight)}"
            data = EntryData(owner=waiter.owner, held=False, since=time.time()).encode()
            session = self.backend.session_id
            with self._lock:
                alone_since, self._alone_since = self._alone_since, None
            create = self.client.create_async(
                prefix, data, ephemeral=True, sequence=True, include_data=True
            )
            listing = None
            if alone_since is None:
                listing = self.client.get_children_async(self.path, include_data=True)
            try:
                path, stat = self._result(create, deadline)
                if listing is None:
                    alone = self._enqueue_alone(waiter, path, stat.czxid, alone_since, session)
                    if alone is not None:
                        return alone
                    listing = self.client.get_children_async(self.path, include_data=True)
                children, parent = self._result(listing, deadline)
            except NoNodeError:
                log.warning("semaphore node %s vanished; creating it again", self.path)
                self._recreate_node(deadline)
                continue
            except ConnectionLoss:
                # The create may or may not have happened: look for our id before
                # creating again, so no orphan entry blocks the queue.
                found = self._find_after_lost_reply(waiter, deadline)
                if found is None:
                    continue
                path, stat, children, parent = found
            except SessionExpiredError:
                continue  # a create in the dead session died with it; kazoo makes a new one
            if parent.mzxid != self._capacity_version and not self._refresh_capacity(deadline):
                continue  # the session ended meanwhile: that entry is gone with it
            if self.backend.session_id != session:
                continue  # raced a session change: that entry is gone with its session
            return self._enqueued(waiter, path, stat.czxid, children)

    def _refresh_capacity(self, deadline: Deadline) -> bool:
        """Read the capacity again and re-arm its watch (the listing showed it changed).
        A read is safe to repeat, so a lost connection is waited out within the deadline
        like any other step. False when the session (or the node) ended meanwhile."""
        while True:
            try:
                raw, stat = self._result(
                    self.client.get_async(self.path, watch=self._capacity_event), deadline
                )
            except ConnectionLoss:
                self.backend.wait_connected(deadline)
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

    def _enqueued(self, waiter: Waiter, path: str, czxid: int, children: list[str]) -> Enqueued:
        node = path.rsplit("/", 1)[1]
        parsed = parse_zk_entry(node)
        assert parsed is not None
        _, weight, my_seq = parsed
        waiter.created(node, czxid)
        lower = []
        later_entries = False
        for child in children:
            p = parse_zk_entry(child)
            if p is None:
                continue
            if p[2] < my_seq:
                lower.append(Entry(key=child, order=p[2], weight=p[1]))
            elif p[2] > my_seq:
                later_entries = True
        if not lower and not later_entries:
            with self._lock:
                self._alone[node] = my_seq
        me = Entry(key=node, order=my_seq, weight=weight)
        capacity, version = self.capacity_answer()
        return Enqueued(
            me, tuple(lower), capacity, later_entries=later_entries, capacity_version=version
        )

    def _find_after_lost_reply(
        self, waiter: Waiter, deadline: Deadline
    ) -> tuple[str, Any, list[str], Any] | None:
        while True:
            self.backend.wait_connected(deadline)
            listing = self.client.get_children_async(self.path, include_data=True)
            try:
                children, parent = self._result(listing, deadline)
                mine = [c for c in children if c.startswith(f"e-{waiter.entry_id}-")]
                if not mine:
                    log.info(
                        "create of %r was lost before it reached ZooKeeper; creating again",
                        self.name,
                    )
                    return None
                path = f"{self.path}/{mine[0]}"
                stat = self._result(self.client.exists_async(path), deadline)
                if stat is None:
                    return None
                log.info("create reply of %r was lost; adopted entry %s", self.name, mine[0])
                return path, stat, children, parent
            except ConnectionLoss:
                continue
            except (SessionExpiredError, NoNodeError):
                return None

    def _recreate_node(self, deadline: Deadline) -> None:
        while True:
            try:
                with contextlib.suppress(NodeExistsError):
                    self._result(
                        self.client.create_async(
                            self.path, encode_capacity(self.capacity), makepath=True
                        ),
                        deadline,
                    )
                return
            except (ConnectionLoss, SessionExpiredError):
                self.backend.wait_connected(deadline)  # a create of a node is safe to repeat

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Mapping[str, EntryState | None] | SessionLost:
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
                        raw, _ = self._result(reply, deadline)
                        data = decode_entry(key, raw)
                        states[key] = EntryState(held=data.held, lower=data.lower)
                    except NoNodeError:
                        states[key] = None  # a get on a missing node leaves no watch behind
                return states
            except ConnectionLoss:
                self.backend.wait_connected(deadline)
            except SessionExpiredError:
                return SessionLost()

    def relist(self, waiter: Waiter, deadline: Deadline) -> list[Entry] | SessionLost:
        assert waiter.key is not None
        parsed = parse_zk_entry(waiter.key)
        assert parsed is not None
        my_seq = parsed[2]
        while True:
            try:
                children = self._result(self.client.get_children_async(self.path), deadline)
            except ConnectionLoss:
                self.backend.wait_connected(deadline)
                continue
            except SessionExpiredError:
                return SessionLost()
            lower = []
            for child in children:
                p = parse_zk_entry(child)
                if p is not None and p[2] < my_seq:
                    lower.append(Entry(key=child, order=p[2], weight=p[1]))
            return lower

    def _entry_watch(self, waiter: Waiter, generation: int, key: str) -> Callable[[Any], None]:
        def fired(event: Any) -> None:
            if event.type == EventType.DELETED:
                waiter.post(generation, EntryDeleted(key))
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
        self.forget_mark(key)
        with self._lock:
            alone = self._alone.pop(key, None)
            self._marks_pending.discard(key)
        if self._delete_now_or_later(f"{self.path}/{key}") and alone is not None:
            with self._lock:
                self._alone_since = alone  # deleted, reply in hand: see _enqueue_alone

    def abandon(self, waiter: Waiter) -> None:
        if waiter.key is not None:
            with self._lock:
                self._alone.pop(waiter.key, None)
                self._marks_pending.discard(waiter.key)
            self._delete_now_or_later(f"{self.path}/{waiter.key}")
        elif waiter.entry_id is not None:
            self._delete_by_id(waiter.entry_id)

    def _delete_now_or_later(self, path: str) -> bool:
        """Delete exactly ``path`` (unique id + sequence: it can only be ours). Waits for
        the reply at most the request timeout; if the connection is down, kazoo sends it
        on reconnect and a ConnectionLoss sends it again until it lands or the session
        is gone. Never raises but an interrupt. True when the reply says it is done."""

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

        if self.backend.failure is not None:
            log.warning("not deleting %s: %s", path, self.backend.failure)
            return False
        reply = self.client.delete_async(path)
        try:
            reply.get(block=True, timeout=self.request_timeout)
            return True
        except KazooTimeoutError:
            log.warning("delete of %s is pending until ZooKeeper is reachable again", path)
        except KazooException:
            pass  # done() below sorts it out
        except Exception as exc:  # kazoo's own failure, e.g. its connection loop dying
            log.warning("delete of %s failed: %r", path, exc)
        except BaseException:
            reply.rawlink(done)  # interrupted: the delete is on its way, keep it going
            raise
        # Only now: a callback costs a hop through kazoo's callback thread.
        reply.rawlink(done)
        return False

    def _delete_by_id(self, entry_id: str) -> None:
        """After an interrupted create: find the entry by its id and delete it. The listing
        goes out on the same session after the create, so it sees the create if it landed."""

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
                    self._delete_now_or_later(f"{self.path}/{child}")

        if self.backend.failure is not None:
            return  # the server removes the entry with the session
        reply = self.client.get_children_async(self.path)
        reply.rawlink(listed)
        with contextlib.suppress(Exception):
            reply.get(block=True, timeout=self.request_timeout)

    # ---- reading and fencing -------------------------------------------------------
    def status(self) -> Status:
        def read(deadline: Deadline) -> tuple[int, list[tuple[int, EntryStatus]]] | None:
            listing = self.client.get_children_async(self.path)
            capacity_reply = self.client.get_async(self.path)
            try:
                children = self._answer(listing, deadline)
                capacity = decode_capacity(self.name, self._answer(capacity_reply, deadline)[0])
            except NoNodeError:
                return None
            entries = []
            for child in children:
                p = parse_zk_entry(child)
                if p is not None:
                    entries.append((p, child, self.client.get_async(f"{self.path}/{child}")))
            rows = []
            for (_, weight, seq), child, reply in entries:
                try:
                    raw, stat = self._answer(reply, deadline)
                except NoNodeError:
                    continue  # left while we listed
                data = decode_entry(child, raw)
                rows.append(
                    (seq, EntryStatus(child, data.owner, weight, stat.czxid, data.held, data.since))
                )
            return capacity, rows

        found = self._bounded(read, f"reading {self.path}")
        if found is None:
            return Status(self.name, self.capacity, (), ())
        capacity, rows = found
        rows.sort(key=lambda r: r[0])
        return split_queue(self.name, capacity, (r[1] for r in rows))

    def transaction(self, key: str, token: int) -> ZooKeeperFencedTransaction:
        # An entry's name is never reused (unique id and sequence): its existence is the fence.
        return ZooKeeperFencedTransaction(self, f"{self.path}/{key}")


class ZooKeeperFencedTransaction(FencedTransaction):
    """A kazoo multi that starts with a check that the permit's entry exists.

    The entry is ephemeral and its name unique, so the multi commits only while the
    permit's session is alive and the permit not released. Keys are paths inside the
    URL's chroot; a created key's parent must exist. ``commit()`` waits for the reply
    at most the request timeout, then raises BackendUnavailable: the multi may still be
    applied after that (kazoo sends it when the connection comes back, and the fence
    holds only while the session lives), so read back before committing again.
    """

    def __init__(self, queue: ZooKeeperQueue, entry_path: str) -> None:
        super().__init__()
        self._queue = queue
        self.entry_path = entry_path

    def commit(self) -> None:
        queue = self._queue
        tx = queue.client.transaction()
        tx.check(self.entry_path, -1)  # version -1: any version, the node must exist
        for write in self.writes:
            if write.kind is WriteKind.CREATE:
                tx.create(write.key, write.value)
            elif write.kind is WriteKind.SET:
                tx.set_data(write.key, write.value, -1)
            else:
                tx.delete(write.key, -1)
        timeout = queue.request_timeout
        try:
            results = tx.commit_async().get(block=True, timeout=timeout)
        except SessionExpiredError as exc:
            raise PermitLost(f"session expired: {self.entry_path} is gone") from exc
        except KazooTimeoutError as exc:
            raise BackendUnavailable(
                f"no answer from ZooKeeper within the request timeout ({timeout:g}"
                " s): the transaction may still be applied"
            ) from exc
        except (ConnectionLoss, ConnectionClosedError) as exc:
            raise BackendUnavailable(
                f"ZooKeeper unreachable: {exc!r}; the transaction may have been applied"
            ) from exc
        paths = [self.entry_path, *(write.key for write in self.writes)]
        for path, result in zip(paths, results, strict=False):
            if isinstance(result, NoAuthError):
                raise queue.backend.permission_denied(path, result) from result
        fence = results[0]
        if isinstance(fence, Exception) and not isinstance(fence, RolledBackError):
            raise PermitLost(f"fence failed: {self.entry_path} is gone") from fence
        for write, result in zip(self.writes, results[1:], strict=False):
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
