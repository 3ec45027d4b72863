"""One semaphore's keys in etcd: the layout, the capacity, and how a call is made.

Layout: ``<prefix><name>/config`` holds ``{"capacity": N}``; each entry is
``<prefix><name>/entries/<lease>-<slot>`` on the session lease, ordered by
create_revision; job slots are ``<prefix><name>/slots/<index>`` on the entry's lease.
The capacity is agreed when the semaphore is opened and kept current by a watch.

Connection loss: a call retries UNAVAILABLE within its deadline (the acquire's, or the
request timeout), then AcquireTimeout / BackendUnavailable. A compacted capacity watch
is read afresh and set again in the background.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.codec import (
    EntryData,
    decode_capacity,
    decode_draining,
    decode_entry,
    decode_ramp,
    encode_capacity,
)
from .._core.deadline import Deadline
from .._core.names import parse_etcd_entry, parse_slot_index, validate_capacity
from .._core.program import Program
from .._core.ramp import RampPlan
from ..backend import QueueDriver
from ..errors import (
    AcquireTimeout,
    BackendUnavailable,
    CapacityMismatch,
    CorruptState,
    SemaphoreNotFound,
)
from . import _proto  # noqa: F401  (makes the generated package importable first)
from ._proto import etcd_api_pb2 as pb
from .entry_txns import EntryCreates
from .errors import EtcdAuthError, EtcdCompacted, EtcdError, EtcdLeaseNotFound, EtcdUnavailable
from .ops import Compare, Op, prefix_range_end
from .retry import retrying
from .rpc import Call, Rpc
from .watch import Watcher

if TYPE_CHECKING:
    from .backend import EtcdBackend

log = logging.getLogger("semaphore_recipes.etcd")

ATTEMPT_TIMEOUT = 2.0  # seconds one request may take before it is retried (it is retry-safe)


def txn_within(
    compare: list[Any], success: list[Any], failure: list[Any], creates: str, timeout: float
) -> Call:
    """A txn that creates the entry ``creates``, sent with ``timeout`` (for ``call``)."""
    return Call.txn(compare, success, failure, timeout=timeout, creates=creates)


def create_within(request: pb.TxnRequest, creates: str, timeout: float) -> Call:
    """The txn ``request`` (:class:`~.entry_txns.EntryCreates`), which creates the entry
    ``creates``, sent with ``timeout`` (for ``call``)."""
    return Call(Rpc.TXN, request, timeout, creates)


class SemaphoreKeys(QueueDriver):
    """The semaphore's keys and capacity; the base of the queue driver's parts."""

    backend: EtcdBackend

    def __init__(self, backend: EtcdBackend, name: str) -> None:
        super().__init__(name, backend)
        self.client = backend.client
        self.base = f"{backend.prefix}{name}/"  # every key of this semaphore
        self.config_key = (self.base + "config").encode()
        self.entries_prefix = (self.base + "entries/").encode()
        self.entries_end = prefix_range_end(self.entries_prefix)
        self.slots_prefix = (self.base + "slots/").encode()  # job slots: slots/<index>
        # the reads of every status txn (built once: they never change; an enqueue's
        # are in its template, ``entry_creates``)
        self.slots_range = Op.range(self.slots_prefix, prefix_range_end(self.slots_prefix))
        self.entries_and_config = [
            Op.range(self.entries_prefix, self.entries_end),
            Op.range(self.config_key),
        ]
        self.entry_creates = EntryCreates(self.entries_prefix, self.entries_end, self.config_key)
        self.closed = False  # close() was called: work in the background stops
        self._capacity_watch: Watcher | None = None

    def opening(self, capacity: int | None, adopt_capacity: bool, create: bool) -> Program[None]:
        """Agree on the capacity (creating the semaphore if ``create``), then watch it."""
        self.capacity = yield from self._agree_capacity(capacity, adopt_capacity, create)
        self._capacity_watch = Watcher(
            self.client,
            self.config_key,
            start_revision=self._capacity_version + 1,
            on_events=self._capacity_events,
            on_error=self._capacity_watch_failed,
        )

    def entry_key(self, uid: str) -> bytes:
        """The etcd key of our entry ``uid`` in this queue."""
        return self.entries_prefix + uid.encode()

    def call(self, make: Callable[[float], Call], deadline: Deadline | None = None) -> Program[Any]:
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

    def slot_key(self, index: int) -> bytes:
        """The key of job slot ``index``."""
        return self.slots_prefix + str(index).encode()

    def slot_index(self, key: bytes) -> int | None:
        """The index of the job slot ``key`` (None: not a slot's key)."""
        return parse_slot_index(key.decode(errors="replace"), self.slots_prefix.decode())

    def slot_indices(self, kvs: Any) -> frozenset[int]:
        """The indices of the listed job slots."""
        indices = (self.slot_index(kv.key) for kv in kvs)
        return frozenset(index for index in indices if index is not None)

    def decode_listed(self, kv: Any) -> tuple[str, int, EntryData]:
        """``(key, weight, data)`` of a listed entry; CorruptState unless it is one the
        library writes (``<lease hex>-<slot>``, readable, weight >= 1). Acquire and status
        both read entries through here: one decoder, one verdict."""
        uid = kv.key[len(self.entries_prefix) :].decode(errors="replace")
        parse_etcd_entry(uid)
        data = decode_entry(uid, kv.value)
        if data.weight is None or data.weight < 1:
            raise CorruptState(f"queue entry {kv.key!r} has no weight >= 1: {kv.value!r}")
        return uid, data.weight, data

    def cancel_watchers(self, watchers: Any) -> None:
        """Cancel watches (a request queued on the client's watch stream, no wait: a
        callback of theirs still running posts to an old generation, which is dropped).
        Never called holding ``_lock``, which their callbacks take."""
        for watcher in watchers:
            watcher.cancel(timeout=0)

    def closing(self) -> list[Watcher]:
        """The queue closes (work in the background stops): the watches to cancel."""
        self.closed = True
        return [] if self._capacity_watch is None else [self._capacity_watch]

    # ---- capacity --------------------------------------------------------------
    def _agree_capacity(self, capacity: int | None, adopt: bool, create: bool) -> Program[int]:
        """Create the config key if ``create`` and it is missing (one txn that also reads
        it), else only read it: without ``create`` nothing is written."""
        if create:
            assert capacity is not None
            reply = yield from self.call(
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
            reply = yield from self.call(
                lambda timeout: Call.range(self.config_key, timeout=timeout)
            )
            kvs = reply.kvs
            if not kvs:
                raise SemaphoreNotFound(self.name, f"etcd key {self.config_key.decode()}")
        stored = decode_capacity(self.name, kvs[0].value)
        self.draining = decode_draining(self.name, kvs[0].value)
        self._capacity_version = kvs[0].mod_revision
        if capacity is not None and stored != capacity and not adopt:
            raise CapacityMismatch(self.name, capacity, stored)
        return stored

    def _capacity_events(self, events: list[Any], revision: int) -> None:
        for event in events:
            if event.type == pb.Event.PUT:
                try:
                    self.apply_config(event.kv)
                except CorruptState as exc:
                    log.error("%s", exc)

    def _capacity_watch_failed(self, exc: Exception) -> None:
        if isinstance(exc, EtcdCompacted) and not self.closed:
            # read it afresh and watch from there, in the background (a watch callback
            # must not wait for a reply)
            self.backend.spawn(self._rewatch_capacity())
        else:
            log.error("semaphore %r: capacity watch ended: %s", self.name, exc)

    def _rewatch_capacity(self) -> Program[None]:
        reply = yield from self.call(lambda timeout: Call.range(self.config_key, timeout=timeout))
        if reply.kvs:
            self.apply_config(reply.kvs[0])
        if self.closed:
            return
        self._capacity_watch = Watcher(
            self.client,
            self.config_key,
            start_revision=reply.header.revision + 1,
            on_events=self._capacity_events,
            on_error=self._capacity_watch_failed,
        )

    def set_capacity(self, capacity: int) -> Program[None]:
        validate_capacity(capacity)
        yield from self._writing_config(capacity, None)
        log.info("semaphore %r: capacity set to %d", self.name, capacity)

    def set_draining(self, draining: bool) -> Program[None]:
        yield from self._writing_config(None, draining)

    def _writing_config(self, capacity: int | None, draining: bool | None) -> Program[None]:
        """Write the capacity or the drain flag (None: keep the stored one) over the
        config as read (a txn comparing its value: another client's change meanwhile
        is read again, never overwritten)."""
        key = self.config_key
        while True:
            read = yield from self.call(lambda timeout: Call.range(key, timeout=timeout))
            ramp: RampPlan | None = None
            if read.kvs:
                raw = read.kvs[0].value
                stored = decode_capacity(self.name, raw), decode_draining(self.name, raw)
                guard = Compare.value(key, "==", raw)
                if capacity is None:  # a flag write keeps a ramp plan; a capacity write drops it
                    ramp = decode_ramp(self.name, raw)
            else:  # deleted: made again, as a waiter would
                stored, guard = (self.capacity, False), Compare.create_revision(key, "==", 0)
            new_capacity = stored[0] if capacity is None else capacity
            new_draining = stored[1] if draining is None else draining
            value = encode_capacity(new_capacity, draining=new_draining, ramp=ramp)
            write = _guarded_put(guard, key, value)
            reply = yield from self.call(write)
            if reply.succeeded:
                self.apply_capacity(new_capacity, reply.header.revision, new_draining)
                return

    def write_ramp(self, capacity: int, ramp: RampPlan | None, version: int) -> Program[int | None]:
        validate_capacity(capacity)
        key = self.config_key
        read = yield from self.call(lambda timeout: Call.range(key, timeout=timeout))
        if not read.kvs:
            raise SemaphoreNotFound(self.name, f"etcd key {key.decode()}")
        if read.kvs[0].mod_revision != version:
            return None  # changed since the status read: the ramp reads again
        draining = decode_draining(self.name, read.kvs[0].value)
        value = encode_capacity(capacity, draining=draining, ramp=ramp)
        guard = Compare.mod_revision(key, "==", version)
        reply = yield from self.call(_guarded_put(guard, key, value))
        if not reply.succeeded:
            return None
        self.apply_capacity(capacity, reply.header.revision, draining)
        return int(reply.header.revision)

    def apply_config(self, kv: Any) -> None:
        """Apply the config key's value ``kv`` (its capacity and drain flag)."""
        raw = kv.value
        self.apply_capacity(
            decode_capacity(self.name, raw), kv.mod_revision, decode_draining(self.name, raw)
        )

    def apply_listed_capacity(self, config: Any) -> None:
        """Apply the capacity a txn read beside a listing (``config``: its kvs), when
        newer than the one applied (decoded only then: usually it is not)."""
        if config and config[0].mod_revision > self._capacity_version:
            self.apply_config(config[0])


def _guarded_put(guard: pb.Compare, key: bytes, value: bytes) -> Callable[[float], Call]:
    """A txn putting ``value`` at ``key`` if ``guard`` holds, for ``call``."""
    return lambda timeout: Call.txn([guard], [Op.put(key, value)], [], timeout=timeout)
