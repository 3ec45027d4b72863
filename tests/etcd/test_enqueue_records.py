"""An etcd enqueue records its attempt and its entry on the waiter (a new generation,
the entry id before the create, the key and token it answers): the base checks it after
``QueueDriver.enqueue`` (DriverContractError), and ``acquire_all``'s enqueue must do the
same. A short queue is answered from the create's txn, a long one after a read of the
nearest entries below: both paths, for one queue and for several."""

from __future__ import annotations

import time

import pytest

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import Enqueue, Enqueued
from semaphore_recipes.backend import QueueDriver, Waiter, nearest_needed
from semaphore_recipes.testing.etcd_harness import EtcdHarness


def recorded(waiter: Waiter, before: int, answer: Enqueued) -> bool:
    return (
        waiter.generation > before
        and waiter.entry_id == answer.me.key
        and waiter.key == answer.me.key
        and waiter.token == answer.me.order
    )


@pytest.mark.parametrize("ahead", [0, nearest_needed(1) + 2], ids=["short", "long"])
def test_each_enqueue_records_its_attempt_and_entry(ed: EtcdHarness, ahead: int) -> None:
    client = ed.connect()
    backend = client.backend
    queues: list[QueueDriver] = [
        client.semaphore(name, capacity=1)._store for name in ("records-a", "records-b")
    ]
    deadline = Deadline(30.0, time.monotonic)
    waiters: list[tuple[QueueDriver, Waiter]] = []

    def waiter(queue: QueueDriver) -> Waiter:
        new = Waiter(1, "test-waiter")
        queue.register(new)
        waiters.append((queue, new))
        return new

    try:
        for queue in queues:
            for _ in range(ahead):
                backend.run(queue.step(waiter(queue), Enqueue(first=False), deadline))
        first = queues[0]
        one = waiter(first)
        before = one.generation
        answer = backend.run(first.step(one, Enqueue(first=False), deadline))  # checked
        assert isinstance(answer, Enqueued)
        assert recorded(one, before, answer)
        assert answer.lower_complete == (ahead == 0)

        pairs = [(queue, waiter(queue)) for queue in queues]
        generations = [w.generation for _, w in pairs]
        answers = backend.run(backend.enqueue_all(pairs, deadline))
        for (queue, w), before in zip(pairs, generations, strict=True):
            assert recorded(w, before, answers[queue.name])
            assert answers[queue.name].lower_complete == (ahead == 0)
    finally:
        for queue, w in waiters:
            backend.run(queue.abandon_entry(w))
            queue.unregister(w)
    assert ed.entries() == []
