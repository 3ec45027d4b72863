"""A waiter of an etcd queue driven by hand, step by step, for the store tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import Enqueued, Event
from semaphore_recipes.backend import Waiter
from semaphore_recipes.etcd.runner import SyncRunner
from semaphore_recipes.etcd.steps import ProtocolSteps
from semaphore_recipes.testing.etcd_harness import EtcdHarness


class RecordingWaiter(Waiter):
    """Keeps every event posted to it, with its generation."""

    def __init__(self) -> None:
        super().__init__(1, "test-waiter")
        self.events: list[tuple[int, Event]] = []

    def deliver(self, generation: int, event: Event) -> None:
        self.events.append((generation, event))


@dataclass
class Enqueuing:
    queue: ProtocolSteps
    runner: SyncRunner
    waiter: RecordingWaiter
    deadline: Deadline
    enqueued: Enqueued


@contextmanager
def enqueued_by_hand(ed: EtcdHarness, name: str, capacity: int) -> Iterator[Enqueuing]:
    """A new client's waiter enqueued in ``name`` (its further steps are the test's);
    its watches dropped and the waiter unregistered at the end."""
    queue = ed.connect().semaphore(name, capacity=capacity)._store
    assert isinstance(queue, ProtocolSteps)
    runner = queue.backend._sync
    assert runner is not None
    waiter = RecordingWaiter()
    deadline = Deadline(30.0, time.monotonic)
    queue.register(waiter)
    try:
        enqueued = queue.backend.run(queue.enqueue(waiter, deadline))
        assert isinstance(enqueued, Enqueued)
        yield Enqueuing(queue, runner, waiter, deadline, enqueued)
    finally:
        queue.drop_watchers(waiter)
        queue.unregister(waiter)
