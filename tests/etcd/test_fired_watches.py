"""A waiter's watch that fired is cancelled by the waiter's own thread, at its next arm
or when its attempt ends, not by the watch reader that delivered the event (sending the
cancel there held up the waiter it had just woken)."""

from __future__ import annotations

import time

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import Arm, Enqueued
from semaphore_recipes.backend import Waiter
from semaphore_recipes.etcd.steps import ProtocolSteps
from semaphore_recipes.etcd.watch import Watcher
from semaphore_recipes.testing.etcd_harness import EtcdHarness

from ..conftest import wait_until


def test_a_fired_watch_ends_at_the_next_arm_or_when_the_attempt_ends(ed: EtcdHarness) -> None:
    holder = ed.connect().semaphore("fired", capacity=1).acquire()
    queue = ed.connect().semaphore("fired", capacity=1)._store
    assert isinstance(queue, ProtocolSteps)
    run = queue.backend.run
    deadline = Deadline(30.0, time.monotonic)
    waiters = [Waiter(1, "test-waiter-a"), Waiter(1, "test-waiter-b")]
    try:
        watchers: list[Watcher] = []
        for waiter in waiters:  # both queued behind the holder, both watching it
            queue.register(waiter)
            enqueued = run(queue.enqueue(waiter, deadline))
            assert isinstance(enqueued, Enqueued)
            assert holder.key in [e.key for e in enqueued.lower]
            run(queue.step(waiter, Arm((holder.key,)), deadline))
            (watcher,) = queue._watchers[waiter].values()
            watchers.append(watcher)
        holder.release()

        def set_aside() -> bool:
            return all(x in queue._fired.get(w, []) for w, x in zip(waiters, watchers, strict=True))

        for waiter in waiters:
            assert waiter.next_event(30) is not None  # the delete, delivered by the reader
        wait_until(set_aside)  # (the reader does it right after it posted the event)
        assert all(watcher.running for watcher in watchers)  # not cancelled by the reader

        first, second = waiters
        run(queue.step(first, Arm((holder.key,)), deadline))  # its next arm ends it
        assert not watchers[0].running and watchers[1].running
        assert first not in queue._fired
        queue.drop_watchers(second)  # its attempt ends
        assert not watchers[1].running
        assert second not in queue._fired and second not in queue._watchers
    finally:
        for waiter in waiters:
            run(queue.abandon_entry(waiter))
            queue.unregister(waiter)
