"""One semaphore's node in ZooKeeper: its path, its capacity, and how a step waits.

The node holds the capacity and the drain flag (one JSON value: they are read and
watched together); its children are the queue's entries and slot records.
The capacity is agreed when the semaphore is opened and kept current by one watch per
process; a step reads it again only when a listing's parent stat shows it changed.

Connection loss: kazoo drops every watch, and the capacity is read again (and watched)
once connected; until then the cached value is not trusted. Session expiry: the backend
arms the watch again on the new session. Reads and writes here (opening, set_capacity)
wait at most the backend's request timeout, then raise BackendUnavailable.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KeeperState

from .._core.codec import decode_capacity, decode_draining, decode_ramp, encode_capacity
from .._core.deadline import Deadline
from .._core.names import join_path, validate_capacity
from .._core.protocol import SessionLost
from .._core.ramp import RampPlan
from ..backend import QueueDriver
from ..errors import AcquireTimeout, CapacityMismatch, SemaphoreNotFound
from ._kazoo_compat import data_watch_registered
from ._waits import Await, Within, ZkProgram

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

log = logging.getLogger("semaphore_recipes.zookeeper")


class SemaphoreNode(QueueDriver):
    """The node and its capacity; the base of the queue driver's parts."""

    backend: ZooKeeperBackend

    def __init__(self, backend: ZooKeeperBackend, name: str) -> None:
        """No I/O: :meth:`opening` agrees the capacity (``backend.open_queue``)."""
        super().__init__(name, backend)
        self.client = backend.client
        self.path = join_path(backend.root, name)
        # kazoo's key for the capacity watch (chroot included): see capacity_current
        self._watch_path = (self.client.chroot or "") + self.path
        self._capacity_settled = False  # the cached capacity is the watched node's value

    # ---- how programs are bounded ------------------------------------------------
    def step_waits(self, deadline: Deadline) -> Within:
        """A protocol step's bound: the acquire's deadline, then AcquireTimeout."""
        return Within(deadline, self._no_answer_in_time, self.path)

    def _no_answer_in_time(self) -> AcquireTimeout:
        return AcquireTimeout(f"semaphore {self.name!r}: no answer from ZooKeeper in time")

    def until_connected(self) -> ZkProgram[None]:
        """Wait until the client is connected (at once when it is)."""
        if not self.backend.connected:
            yield Await.CONNECTION

    # ---- capacity -------------------------------------------------------------
    def opening(
        self, capacity: int | None, adopt: bool, create: bool
    ) -> Callable[[], ZkProgram[int]]:
        """The opening, as a retry-safe attempt for ``backend.within_request_timeout``:
        create the node if ``create`` and it is missing, then read (and watch) the
        stored capacity; without ``create`` nothing is written. Returns the capacity;
        CapacityMismatch, SemaphoreNotFound."""

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
            self.draining = decode_draining(self.name, raw)
            return stored

        return agree

    def _capacity_event(self, event: Any) -> None:
        if self.backend.closed or (event.type == EventType.NONE and session_ended(event)):
            return  # the session ended: the backend re-arms us on the new session
        # a change, or the connection lost (kazoo drops every watch then): read again,
        # which kazoo sends once it is connected
        self.arm_capacity_watch()

    def arm_capacity_watch(self) -> None:
        self._capacity_settled = False  # until _capacity_read applies what this reads
        self.client.get_async(self.path, watch=self._capacity_event).rawlink(self._capacity_read)

    def _capacity_read(self, result: Any) -> None:
        try:
            raw, stat = result.get(block=False)
            capacity = decode_capacity(self.name, raw)
            draining = decode_draining(self.name, raw)
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
        self.apply_capacity(capacity, stat.mzxid, draining)
        self._capacity_settled = True

    def capacity_current(self) -> bool:
        """Is the cached capacity the stored one, as of the replies received so far?
        ZooKeeper sends a change's watch event before the reply to any later request,
        and kazoo's connection thread unregisters the watcher as it reads that event, so
        a registered watcher whose read has been applied means no change was missed."""
        return self._capacity_settled and data_watch_registered(
            self.client, self._watch_path, self._capacity_event
        )

    def set_capacity(self, capacity: int) -> ZkProgram[None]:
        validate_capacity(capacity)
        writing = self._writing_config(capacity, None)
        yield from self.backend.within_request_timeout(writing, f"writing {self.path}", self.path)
        log.info("semaphore %r: capacity set to %d", self.name, capacity)

    def set_draining(self, draining: bool) -> ZkProgram[None]:
        writing = self._writing_config(None, draining)
        yield from self.backend.within_request_timeout(writing, f"writing {self.path}", self.path)

    def _writing_config(
        self, capacity: int | None, draining: bool | None
    ) -> Callable[[], ZkProgram[None]]:
        """Write the capacity or the drain flag (None: keep the stored one), reading
        the other first and writing only over that version (a read-modify-write:
        another client's change meanwhile is read again, never overwritten)."""

        def write() -> ZkProgram[None]:
            while True:
                try:
                    raw, read = yield self.client.get_async(self.path)
                except NoNodeError:
                    fresh = encode_capacity(capacity or self.capacity, draining=bool(draining))
                    with contextlib.suppress(NodeExistsError):
                        yield self.client.create_async(self.path, fresh, makepath=True)
                    continue
                new_capacity = decode_capacity(self.name, raw) if capacity is None else capacity
                new_draining = decode_draining(self.name, raw) if draining is None else draining
                # a capacity write drops a ramp plan (it cancels it); a flag write keeps it
                ramp = decode_ramp(self.name, raw) if capacity is None else None
                value = encode_capacity(new_capacity, draining=new_draining, ramp=ramp)
                try:
                    stat = yield self.client.set_async(self.path, value, version=read.version)
                except (BadVersionError, NoNodeError):
                    continue  # changed (or deleted) since our read: read again
                self.apply_capacity(new_capacity, stat.mzxid, new_draining)
                return

        return write

    def write_ramp(
        self, capacity: int, ramp: RampPlan | None, version: int
    ) -> ZkProgram[int | None]:
        validate_capacity(capacity)

        def write() -> ZkProgram[int | None]:
            try:
                raw, read = yield self.client.get_async(self.path)
            except NoNodeError:
                raise SemaphoreNotFound(self.name, f"ZooKeeper node {self.path}") from None
            if read.mzxid != version:
                return None  # changed since the status read: the ramp reads again
            draining = decode_draining(self.name, raw)
            value = encode_capacity(capacity, draining=draining, ramp=ramp)
            try:
                stat = yield self.client.set_async(self.path, value, version=read.version)
            except (BadVersionError, NoNodeError):
                return None
            self.apply_capacity(capacity, stat.mzxid, draining)
            return int(stat.mzxid)

        writing = self.backend.within_request_timeout(write, f"writing {self.path}", self.path)
        return (yield from writing)

    def capacity_checked(self, version: int) -> ZkProgram[bool]:
        """Is the capacity a listing saw (its parent's ``mzxid``) the one applied? If
        not, read it again; False when the session (or the node) ended meanwhile."""
        if version == self._capacity_version:
            return True
        return (yield from self._refresh_capacity())

    def _refresh_capacity(self) -> ZkProgram[bool]:
        """Read the capacity again and re-arm its watch (the listing showed it changed).
        A read is safe to repeat, so a lost connection is waited out within the deadline
        like any other step. False when the session (or the node) ended meanwhile."""
        while True:
            try:
                raw, stat = yield self.client.get_async(self.path, watch=self._capacity_event)
            except ConnectionLoss:
                yield from self.until_connected()
                continue
            except (SessionExpiredError, NoNodeError):
                return False
            capacity = decode_capacity(self.name, raw)
            self.apply_capacity(capacity, stat.mzxid, decode_draining(self.name, raw))
            return True

    def recreate_node(self) -> ZkProgram[None]:
        """Create the semaphore's node again (it vanished), with the capacity we know."""
        while True:
            try:
                with contextlib.suppress(NodeExistsError):
                    value = encode_capacity(self.capacity, draining=self.draining)
                    yield self.client.create_async(self.path, value, makepath=True)
                return
            except (ConnectionLoss, SessionExpiredError):
                yield Await.CONNECTION  # a create of a node is safe to repeat

    def children(self, *lost: type[Exception]) -> ZkProgram[list[str] | SessionLost]:
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


def session_ended(event: Any) -> bool:
    """Was a watch fired with kazoo's NONE event because the session ended, rather than
    because the connection was lost (kazoo drops every watch then too, firing it with
    the state CONNECTING, while the session may resume)?"""
    return event.state in (KeeperState.EXPIRED_SESSION, KeeperState.CLOSED, KeeperState.AUTH_FAILED)
