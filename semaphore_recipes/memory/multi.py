"""Several semaphores at once on a memory store: one atomic create, one atomic delete."""

from __future__ import annotations

import functools
import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING

from ..backend import (
    Deadline,
    Enqueued,
    Entry,
    EntryData,
    QueueDriver,
    Waiter,
    call_with_sigint_held,
    queues_of,
)
from .queue import Connected, MemoryQueue, queue_entry
from .store import SessionEnded

if TYPE_CHECKING:
    from .backend import MemoryBackend


def enqueue_all(
    backend: MemoryBackend, pairs: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
) -> Generator[object, object, dict[str, Enqueued]]:
    """The EnqueueAll step (a program): every entry in one store operation, so they
    share one revision (their token and order), and each queue's lower entries."""
    queues = queues_of(MemoryQueue, pairs)
    for queue, waiter in queues:
        queue.drop_watches(waiter)
    while True:
        for _, waiter in queues:
            waiter.new_generation()  # as MemoryQueue._enqueue: one per attempt
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
        for (queue, waiter), request, answer in zip(queues, requests, created, strict=True):
            entry, lower, complete, capacity, version = answer
            waiter.created(request[1], entry.token)
            queue.apply_capacity(capacity, version)
            answers[queue.name] = Enqueued(
                me=Entry(key=entry.key, order=entry.token, weight=waiter.weight),
                lower=tuple(queue_entry(e) for e in lower),
                capacity=capacity,
                later_entries=False,  # the listing is atomic with the create
                capacity_version=version,
                lower_complete=complete,
            )
        return answers


def delete_all(
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
