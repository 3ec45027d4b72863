"""One semaphore's queue in a memory store: the store's side of the protocol steps.

Entries are ordered by their token, the store revision that created them (it only
grows, across the whole store); the listing of an enqueue is atomic with its create, so
it never holds a later entry. Watches are etcd's: they stay across a held mark (whose
event carries the mark) and end with the entry's deletion.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..backend import (
    Deadline,
    Enqueued,
    Entry,
    EntryData,
    EntryMarked,
    EntryState,
    EntryStatus,
    QueueDriver,
    RampPlan,
    SessionLost,
    Status,
    Waiter,
    call_with_sigint_held,
    queues_of,
    split_queue,
)
from ..errors import CapacityMismatch, SemaphoreNotFound
from .store import SessionEnded, StoredEntry
from .transaction import MemoryFencedTransaction

if TYPE_CHECKING:
    from .backend import MemoryBackend
    from .store import EntryWatch

T = TypeVar("T")


@dataclass(frozen=True)
class Connected:
    """What a memory program waits for: the backend connected (its answer: the session
    to send the request on), within ``deadline`` or, without one, the request timeout."""

    deadline: Deadline | None


class MemoryQueue(QueueDriver):
    backend: MemoryBackend

    def __init__(self, backend: MemoryBackend, name: str) -> None:
        super().__init__(name, backend)
        self.store = backend.store
        self.path = backend.semaphore_path(name)
        self._watches: dict[Waiter, list[tuple[str, int]]] = {}  # waiter -> (key, watch id)
        self._holder_watches: dict[str, int] = {}  # key -> watch id (acquire(watch_entry))

    def open(
        self, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Generator[object, object, MemoryQueue]:
        """Create the semaphore if ``create`` and it is missing, then agree on the
        capacity (a program: ``backend.run`` or ``backend.run_async`` runs it)."""
        opened = yield from self.call(
            lambda: self.store.open_semaphore(
                self.path, capacity if create else None, self.apply_capacity
            )
        )
        if opened is None:
            where = f"memory store {self.store.name!r} at {self.path}"
            raise SemaphoreNotFound(self.name, where)
        stored, version, draining = opened
        with self._lock:  # a change applied meanwhile by the listener is newer
            if version > self._capacity_version:
                self._capacity_version, self.capacity = version, stored
                self.draining = draining
        if capacity is not None and stored != capacity and not adopt_capacity:
            raise CapacityMismatch(self.name, capacity, stored)
        return self

    def call(
        self, request: Callable[[], T], deadline: Deadline | None = None
    ) -> Generator[object, object, T]:
        """One request to the store, once connected (see ``MemoryBackend.request``).
        On the main thread Ctrl-C waits until it returns: a change and the events it
        owes the watchers are never torn apart."""
        yield Connected(deadline)
        return call_with_sigint_held(request)

    # ---- capacity ------------------------------------------------------------------------
    def set_capacity(self, capacity: int) -> Generator[object, object, None]:
        yield from self.call(lambda: self.store.set_capacity(self.path, capacity))

    def set_draining(self, draining: bool) -> Generator[object, object, None]:
        capacity = self.capacity
        yield from self.call(lambda: self.store.set_draining(self.path, draining, capacity))

    def write_ramp(
        self, capacity: int, ramp: RampPlan | None, version: int
    ) -> Generator[object, object, int | None]:
        text = None if ramp is None else ramp.encode()
        return (
            yield from self.call(lambda: self.store.write_ramp(self.path, capacity, text, version))
        )

    # ---- the protocol steps ----------------------------------------------------------------
    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Generator[object, object, Enqueued]:
        entered = yield from enter_queues(self.backend, [(self, waiter)], deadline)
        return entered[self.name]

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Generator[object, object, Mapping[str, EntryState | None]]:
        generation = waiter.generation

        def watch(key: str) -> EntryWatch:
            def changed(entry: StoredEntry | None) -> None:
                if entry is None:
                    waiter.entry_deleted(generation, key)
                else:
                    waiter.post(generation, EntryMarked(key, entry.data.lower))

            return changed

        found = yield from self.call(
            lambda: self.store.watch_entries(self.path, keys, watch), deadline
        )
        states: dict[str, EntryState | None] = {}
        with self._lock:
            armed = self._watches.setdefault(waiter, [])
            for key, (entry, watch_id) in found.items():
                if entry is None or watch_id is None:
                    states[key] = None
                    continue
                armed.append((key, watch_id))
                states[key] = EntryState(held=entry.data.held, lower=entry.data.lower)
        return states

    def confirm(self, waiter: Waiter, deadline: Deadline) -> Generator[object, object, bool]:
        key, token = waiter.key, waiter.token
        assert token is not None
        below = yield from self.call(lambda: self.store.entries(self.path, token + 1), deadline)
        return any(e.key == key and e.token == token for e in below)

    def relist(
        self, waiter: Waiter, deadline: Deadline
    ) -> Generator[object, object, Sequence[Entry]]:
        token = waiter.token
        assert token is not None
        entries = yield from self.call(lambda: self.store.entries(self.path, token), deadline)
        return [queue_entry(e) for e in entries]

    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        def write() -> None:
            if not call_with_sigint_held(lambda: self.store.mark_held(self.path, key, token, mark)):
                on_lost("the entry was gone when its held mark was written")

        self.backend.send(write)

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        def changed(entry: StoredEntry | None) -> None:
            if entry is None:
                on_lost("the entry was deleted (session ended, or by hand)")

        def watch(key: str) -> EntryWatch:
            return changed

        def start() -> None:
            found = call_with_sigint_held(
                lambda: self.store.watch_entries(self.path, (key,), watch)
            )
            entry, watch_id = found[key]
            if entry is None or watch_id is None or entry.token != token:
                on_lost("the entry was gone when the holder began watching it")
                return
            with self._lock:
                self._holder_watches[key] = watch_id

        self.backend.send(start)  # now, or on reconnect: never blocks (the asyncio face)

    # ---- revocation: a flag on the entry, told to its holder's watch ----------------------
    def request_revoke(self, key: str, token: int) -> Generator[object, object, bool]:
        return (yield from self.call(lambda: self.store.request_revoke(self.path, key, token)))

    def watch_revocation(self, key: str, token: int, on_revoke: Callable[[], None]) -> None:
        self.backend.send(
            lambda: call_with_sigint_held(
                lambda: self.store.watch_revocation(self.path, key, token, on_revoke)
            )
        )

    def remove_revoked(self, key: str, token: int) -> Generator[object, object, bool]:
        return (yield from self.call(lambda: self.store.delete_entry(self.path, key, token)))

    # ---- job slots: records in the store, deleted with their entry -------------------------
    def list_slots(
        self, waiter: Waiter, deadline: Deadline
    ) -> Generator[object, object, frozenset[int]]:
        return (yield from self.call(lambda: self.store.slots(self.path), deadline))

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> Generator[object, object, int | frozenset[int] | SessionLost]:
        key, token = waiter.key, waiter.token
        assert key is not None and token is not None
        taken = yield from self.call(
            lambda: self.store.take_slot(self.path, key, token, index), deadline
        )
        return SessionLost() if taken is None else taken  # None: our entry is gone

    # ---- leaving ----------------------------------------------------------------------------
    def unregister(self, waiter: Waiter) -> None:
        super().unregister(waiter)
        self.drop_watches(waiter)

    def drop_watches(self, waiter: Waiter) -> None:
        """Stop the watches armed for ``waiter``'s lower entries."""
        with self._lock:
            armed = self._watches.pop(waiter, [])
        for key, watch_id in armed:
            self.store.unwatch(self.path, key, watch_id)

    def remove(
        self, key: str, slot_records: Mapping[int, int | None]
    ) -> Generator[object, object, None]:
        """Sent now, or on reconnect (a program with nothing to wait for); the store
        deletes the entry's slot records with it."""
        yield from ()
        with self._lock:
            watch_id = self._holder_watches.pop(key, None)
        if watch_id is not None:  # first: our own delete is no loss to report
            self.store.unwatch(self.path, key, watch_id)
        self.store.unwatch_revocation(self.path, key)
        self.backend.send(
            lambda: call_with_sigint_held(lambda: self.store.delete_entry(self.path, key))
        )

    def abandon(
        self, waiter: Waiter, slot_records: Mapping[int, int | None]
    ) -> Generator[object, object, None]:
        # The entry id is the entry's key, chosen before the create.
        key = waiter.key or waiter.entry_id
        if key is not None:
            yield from self.remove(key, slot_records)

    def status(self) -> Generator[object, object, Status]:
        # (the version first: a write between the two reads fails a ramp step over it)
        config = yield from self.call(lambda: self.store.config(self.path))
        stored, draining, entries, slots = yield from self.call(lambda: self.store.queue(self.path))
        if stored is None or config is None:  # deleted (or never stored): not the capacity we knew
            where = f"memory store {self.store.name!r} at {self.path}"
            raise SemaphoreNotFound(self.name, where)
        capacity = stored
        rows = [
            EntryStatus(
                e.key,
                e.data.owner,
                _weight(e),
                e.token,
                e.data.held,
                e.data.since,
                tuple(sorted(i for i, key in slots.items() if key == e.key)),
                e.revoke_requested,
            )
            for e in entries
        ]
        version, ramp = config
        return split_queue(
            self.name,
            capacity,
            rows,
            draining=draining,
            ramp=RampPlan.decode(self.name, ramp),
            config_version=version,
        )

    def transaction(self, key: str, token: int) -> MemoryFencedTransaction:
        return MemoryFencedTransaction(self, key, token)


def enter_queues(
    backend: MemoryBackend, pairs: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
) -> Generator[object, object, dict[str, Enqueued]]:
    """The Enqueue step of one queue, and of several at once (``acquire_all``): every
    entry in one store operation, so they share one revision (their token and order),
    and each queue's lower entries, listed in the same operation (no later entry)."""
    queues = queues_of(MemoryQueue, pairs)
    for queue, waiter in queues:
        queue.drop_watches(waiter)
    while True:
        for _, waiter in queues:
            # A generation per attempt: the end of a session this attempt gave up on is
            # reported to the attempt that made an entry on it, not to this one.
            waiter.new_generation()
        session = yield Connected(deadline)
        assert isinstance(session, int)
        requests = []
        for queue, waiter in queues:
            key = backend.store.new_entry_key(session)
            waiter.creating(key)  # before the create: an interrupted acquire finds it
            data = EntryData(
                owner=waiter.owner, held=False, since=time.time(), weight=waiter.weight
            )
            requests.append((queue.path, key, data, queue.capacity))
        try:
            create = functools.partial(backend.store.create_entries, session, requests)
            created = call_with_sigint_held(create)
        except SessionEnded:
            continue  # expired meanwhile: the backend has a new session
        answers: dict[str, Enqueued] = {}
        for (queue, waiter), answer in zip(queues, created, strict=True):
            entry, lower, complete, capacity, version, draining = answer
            waiter.created(entry.key, entry.token)
            queue.apply_capacity(capacity, version, draining)
            answers[queue.name] = Enqueued(
                me=Entry(key=entry.key, order=entry.token, weight=waiter.weight),
                lower=tuple(queue_entry(e) for e in lower),
                capacity=capacity,
                later_entries=False,  # the listing is atomic with the create
                capacity_version=version,
                lower_complete=complete,
            )
        return answers


def leave_queues(
    backend: MemoryBackend, pairs: Sequence[tuple[QueueDriver, Waiter]]
) -> Generator[object, object, None]:
    """Every waiter's entry (the entry id is the key, chosen before the create), in one
    store operation: sent now, or on reconnect (a program with nothing to wait for)."""
    yield from ()
    entries = []
    for queue, waiter in queues_of(MemoryQueue, pairs):
        queue.drop_watches(waiter)
        key = waiter.key or waiter.entry_id
        if key is not None:
            entries.append((queue.path, key))
    if entries:
        backend.send(lambda: call_with_sigint_held(lambda: backend.store.delete_entries(entries)))


def _weight(entry: StoredEntry) -> int:
    weight = entry.data.weight
    assert weight is not None  # every entry is created with its weight
    return weight


def queue_entry(stored: StoredEntry) -> Entry:
    """The protocol's view of a stored entry."""
    return Entry(key=stored.key, order=stored.token, weight=_weight(stored), held=stored.data.held)
