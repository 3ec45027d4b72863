"""Several semaphores at once, atomically: the single-queue protocol run in every queue.

One request takes ``weight`` permits of each of several semaphores. Its entries are
created in **one** store transaction (ZooKeeper ``multi``, etcd txn), so every queue
orders any two such requests the same way (commit order): a request only ever waits for
earlier transactions, so waits form no cycle and no request deadlocks. Each queue keeps
its own :class:`QueuePosition`: admission, watches, held marks and stale views per queue
are exactly those of :func:`acquire_protocol`. The request is granted once it is admitted
in every queue; a queue that admits it first keeps it admitted (as a holder of that
semaphore) while it waits in the others: it waits only for earlier requests, which are
granted in turn.

The steps are the single-queue ones wrapped in :class:`InQueue` (which queue they are
for), plus one :class:`EnqueueAll`; events come wrapped in :class:`QueueEvent`, except
SessionLost and BackendFailed, which concern the one session all entries share. The
driver owns cleanup: on any exception out of the generator it removes every entry of the
last :class:`EnqueueAll` it answered, in one request.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass

from ..errors import AcquireTimeout, BackendUnavailable, Draining, WouldBlock
from .deadline import Deadline
from .protocol import (
    Arm,
    AwaitEvent,
    BackendFailed,
    CapacityChanged,
    Enqueued,
    Event,
    MarkHeld,
    Relist,
    SessionLost,
    StoreAdmitted,
    apply_event,
    told_to_drain,
)
from .queue import Admitted, Entry, QueuePosition


@dataclass(frozen=True)
class EnqueueAll:
    """Create one fresh entry in every queue of the request in one atomic transaction,
    then list each queue's lower entries. ``first`` as for :class:`Enqueue`.
    Answer: :class:`EnqueuedAll`."""

    first: bool


@dataclass(frozen=True)
class EnqueuedAll:
    """Each queue's :class:`Enqueued` answer, by semaphore name."""

    queues: Mapping[str, Enqueued]


@dataclass(frozen=True)
class InQueue:
    """A single-queue step (:class:`Arm`, :class:`Relist`, :class:`MarkHeld`) for the
    queue of semaphore ``name``; answered as that step is."""

    name: str
    step: Arm | Relist | MarkHeld


@dataclass(frozen=True)
class QueueEvent:
    """A store event of the queue of semaphore ``name`` (entries, marks, capacity)."""

    name: str
    event: Event


MultiStep = EnqueueAll | InQueue | AwaitEvent


def describe(weights: Mapping[str, int]) -> str:
    """The request as errors name it: ``'a' x1, 'b' x2``."""
    return ", ".join(f"{name!r} x{weight}" for name, weight in sorted(weights.items()))


class _Queue:
    """Where one request stands in one queue."""

    def __init__(self, answer: Enqueued) -> None:
        self.position = QueuePosition(
            answer.me,
            answer.lower,
            answer.capacity,
            capacity_version=answer.capacity_version,
            complete=answer.lower_complete,
        )
        # as in acquire_protocol: only successors already listed, or that listed us
        # while we waited here, need our held mark
        self.mark_now = answer.later_entries
        self.admitted = False
        self.marked = False


def multi_acquire_protocol(
    weights: Mapping[str, int],
    deadline: Deadline,
    *,
    blocking: bool = True,
    server_admission: bool = False,
) -> Generator[MultiStep, object, dict[str, Entry]]:
    """Drive one ``acquire_all``: returns each semaphore's admitted entry once every
    queue admitted the request (each queue's :class:`MarkHeld` answered). With
    ``server_admission`` each queue's store decides (:func:`multi_store_admission`).

    Raises WouldBlock, AcquireTimeout or BackendUnavailable as :func:`acquire_protocol`
    does; re-enters every queue with fresh entries, in one transaction, after a
    SessionLost (all entries share the session, so all are gone).
    """
    if server_admission:
        return (yield from multi_store_admission(weights, deadline, blocking=blocking))
    what = describe(weights)
    first = True
    while True:
        answer = yield EnqueueAll(first=first)
        first = False
        assert isinstance(answer, EnqueuedAll)
        assert set(answer.queues) == set(weights), "one entry per semaphore asked"
        refuse_draining(answer)
        queues = {name: _Queue(enqueued) for name, enqueued in answer.queues.items()}
        lost = False
        while not lost:
            waiting: list[str] = []
            for name, queue in queues.items():
                if queue.admitted:
                    continue
                position = queue.position
                if position.stale:
                    listing = yield InQueue(name, Relist())
                    if isinstance(listing, SessionLost):
                        lost = True
                        break
                    assert isinstance(listing, (list, tuple))
                    position.relisted(listing)
                if isinstance(position.decision(), Admitted):
                    # Admitted here for good (lower entries only leave): mark it as a
                    # single acquire would, so this queue's successors move on while we
                    # wait in the others.
                    queue.admitted = True
                    queue.marked = queue.mark_now
                    yield InQueue(
                        name,
                        MarkHeld(position.me, now=queue.mark_now, lower=position.lower_keys()),
                    )
                else:
                    waiting.append(name)
            if lost:
                break
            if not waiting:
                return {name: queue.position.me for name, queue in queues.items()}
            if not blocking:
                raise WouldBlock(f"semaphores {what}: not all available now")
            if deadline.expired():
                raise AcquireTimeout(f"semaphores {what}: not all granted in time")
            armed_any = False
            for name in waiting:
                queue = queues[name]
                queue.mark_now = True
                decision = queue.position.decision()
                assert not isinstance(decision, Admitted)
                keys = queue.position.keys_to_arm(decision)
                if not keys:
                    continue
                states = yield InQueue(name, Arm(keys))
                if isinstance(states, SessionLost):
                    lost = True
                    break
                assert isinstance(states, Mapping)
                for key in keys:
                    queue.position.armed(key, states.get(key))
                armed_any = True
                break  # decide again before arming further (as the single path does)
            if lost or armed_any:
                continue
            event = yield AwaitEvent(deadline.remaining())
            if event is None:
                continue
            if isinstance(event, SessionLost):
                break
            if isinstance(event, BackendFailed):
                raise BackendUnavailable(f"semaphores {what}: {event.reason}")
            assert isinstance(event, QueueEvent)
            queue_of = queues.get(event.name)
            if queue_of is None:
                continue
            if told_to_drain(event.event, queue_of.position.capacity_version):
                raise Draining(event.name)
            if not queue_of.admitted:
                apply_event(queue_of.position, event.event)
            elif isinstance(event.event, CapacityChanged) and not queue_of.marked:
                # Admitted here without a mark, and the capacity changed while we wait
                # elsewhere: a newcomer that reads a lower capacity may take us for not
                # admitted, so mark now (what a holder's process does on a decrease).
                queue_of.marked = True
                position = queue_of.position
                yield InQueue(
                    event.name, MarkHeld(position.me, now=True, lower=position.lower_keys())
                )


def refuse_draining(answer: EnqueuedAll) -> None:
    """Draining for the first semaphore of the request that drains: the request is
    refused as a whole (its entries leave with it)."""
    for name in sorted(answer.queues):
        if answer.queues[name].draining:
            raise Draining(name)


def multi_store_admission(
    weights: Mapping[str, int], deadline: Deadline, *, blocking: bool = True
) -> Generator[MultiStep, object, dict[str, Entry]]:
    """:func:`multi_acquire_protocol` where the store's writes decide admission, as
    ``_core.protocol.store_admission`` for one queue: a queue admits the request in the
    enqueue's answer or with StoreAdmitted (its MarkHeld then, which marks nothing);
    granted once every queue admitted it."""
    what = describe(weights)
    first = True
    while True:
        answer = yield EnqueueAll(first=first)
        first = False
        assert isinstance(answer, EnqueuedAll)
        assert set(answer.queues) == set(weights), "one entry per semaphore asked"
        refuse_draining(answer)
        mine = {name: enqueued.me for name, enqueued in answer.queues.items()}
        waiting = {name for name, enqueued in answer.queues.items() if not enqueued.admitted}
        # each queue's newest config version we know of
        known = {name: enqueued.capacity_version for name, enqueued in answer.queues.items()}
        for name in sorted(set(mine) - waiting):
            yield InQueue(name, MarkHeld(mine[name], now=False, lower=None))
        while waiting:
            if not blocking:
                raise WouldBlock(f"semaphores {what}: not all available now")
            if deadline.expired():
                raise AcquireTimeout(f"semaphores {what}: not all granted in time")
            event = yield AwaitEvent(deadline.remaining())
            if isinstance(event, SessionLost):
                break  # every entry died with the session: enqueue again
            if isinstance(event, BackendFailed):
                raise BackendUnavailable(f"semaphores {what}: {event.reason}")
            if isinstance(event, QueueEvent) and event.name in known:
                if told_to_drain(event.event, known[event.name]):
                    raise Draining(event.name)
                if isinstance(event.event, CapacityChanged):
                    known[event.name] = max(known[event.name], event.event.version)
            if (
                isinstance(event, QueueEvent)
                and isinstance(event.event, StoreAdmitted)
                and event.name in waiting
                and event.event.key == mine[event.name].key
            ):
                waiting.discard(event.name)
                yield InQueue(event.name, MarkHeld(mine[event.name], now=False, lower=None))
        if not waiting:
            return mine
