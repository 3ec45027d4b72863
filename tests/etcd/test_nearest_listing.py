"""An etcd enqueue lists only the nearest entries below its own (design.md section 2,
"Truncated views"): a waiter far back in a long queue does not read all of it."""

from __future__ import annotations

import time

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes.backend import Waiter, nearest_needed
from semaphore_recipes.testing.etcd_harness import EtcdHarness


def test_enqueue_lists_the_nearest_entries_and_says_the_listing_is_truncated(
    ed: EtcdHarness,
) -> None:
    queue = ed.connect().semaphore("nearest", capacity=1)._store
    nearest = nearest_needed(1)
    deadline = Deadline(30.0, time.monotonic)
    waiters, answers = [], []
    try:
        for _ in range(nearest + 6):
            waiter = Waiter(1, "test-waiter")
            queue.register(waiter)
            waiters.append(waiter)
            answers.append(queue.enqueue(waiter, deadline))
        tokens = [a.me.order for a in answers]
        assert tokens == sorted(tokens)
        # a short queue is listed whole
        short = answers[nearest]
        assert short.lower_complete
        assert sorted(e.order for e in short.lower) == tokens[:nearest]
        # a longer one: only the nearest entries below, and it says so
        last = answers[-1]
        assert not last.lower_complete
        assert sorted(e.order for e in last.lower) == tokens[-1 - nearest : -1]
        # read after the create, outside its txn: successors may need our held mark
        assert last.later_entries
        assert not short.later_entries  # listed in the create's txn: nobody after us
    finally:
        for waiter in waiters:
            queue.abandon(waiter)
            queue.unregister(waiter)
    assert ed.entries() == []
