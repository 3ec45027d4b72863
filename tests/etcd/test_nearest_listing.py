"""An etcd enqueue lists only the nearest entries below its own (design.md section 2,
"Truncated views"): a waiter far back in a long queue does not read all of it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from semaphore_recipes import aio
from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import Enqueued
from semaphore_recipes.backend import Waiter, nearest_needed
from semaphore_recipes.etcd import steps
from semaphore_recipes.etcd.keyspace import SemaphoreKeys, create_within
from semaphore_recipes.testing.etcd_harness import EtcdHarness


def test_enqueue_lists_the_nearest_entries_and_says_the_listing_is_truncated(
    ed: EtcdHarness,
) -> None:
    queue = ed.connect().semaphore("nearest", capacity=1)._store
    run = queue.backend.run
    nearest = nearest_needed(1)
    deadline = Deadline(30.0, time.monotonic)
    waiters, answers = [], []
    try:
        for _ in range(nearest + 6):
            waiter = Waiter(1, "test-waiter")
            queue.register(waiter)
            waiters.append(waiter)
            answers.append(run(queue.enqueue(waiter, deadline)))
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
            run(queue.abandon_entry(waiter))
            queue.unregister(waiter)
    assert ed.entries() == []


def test_waiters_enqueuing_together_share_the_read_of_their_nearest_entries(
    ed: EtcdHarness, etcd_server: Any
) -> None:
    """etcd reads and sorts the whole queue for the read of the entries below a waiter,
    whatever its limit: one such read per waiter made a burst of W enqueues O(W²) on the
    server (at W=10,000 the drain's server CPU grew with W). Threads enqueuing at once
    behind a long queue share reads, and each still gets its own nearest entries."""
    queue = ed.connect().semaphore("shared-nearest", capacity=1)._store
    run = queue.backend.run
    nearest = nearest_needed(1)
    burst = 48
    deadline = Deadline(60.0, time.monotonic)
    waiters: list[Waiter] = []

    def waiter() -> Waiter:
        new = Waiter(1, "test-waiter")
        queue.register(new)
        waiters.append(new)
        return new

    answers: dict[int, Enqueued] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(burst)

    def enqueue(i: int, one: Waiter) -> None:
        try:
            start.wait()
            answers[i] = run(queue.enqueue(one, deadline))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def ranges() -> float:
        return float(etcd_server.metrics().total("grpc_server_handled_total", grpc_method="Range"))

    try:
        ahead = [run(queue.enqueue(waiter(), deadline)).me.order for _ in range(nearest + 2)]
        together = [waiter() for _ in range(burst)]
        before = ranges()
        threads = [threading.Thread(target=enqueue, args=(i, w)) for i, w in enumerate(together)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        reads = ranges() - before
        assert not errors, errors
        tokens = sorted([*ahead, *(a.me.order for a in answers.values())])
        for answer in answers.values():
            mine = answer.me.order
            below = [t for t in tokens if t < mine]
            assert sorted(e.order for e in answer.lower) == below[-nearest:]
            assert not answer.lower_complete
            assert answer.later_entries
        print(f"{burst} enqueues behind {len(ahead)} entries: {reads:g} range reads")
        assert reads <= burst / 2, f"{reads:g} reads for {burst} waiters: not shared"
    finally:
        for one in waiters:
            run(queue.abandon_entry(one))
            queue.unregister(one)
    assert ed.entries() == []


def test_behind_a_queue_found_long_the_enqueue_txn_leaves_the_entries_range_out(
    ed: EtcdHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range in a write txn is read by etcd's apply loop, which lease renewals wait
    for, and etcd walks every key of the range to count it whatever the limit: at
    W = 100,000 the enqueues' ranges starved the leases. Once a listing found the queue
    longer than the txn lists, the next enqueues leave the range out (their nearest
    entries are read outside the txn in any case); a read that finds it short puts it
    back. The answers are the same either way."""
    queue = ed.connect().semaphore("long-txn", capacity=1)._store
    assert isinstance(queue, SemaphoreKeys)
    run = queue.backend.run
    nearest = nearest_needed(1)
    deadline = Deadline(30.0, time.monotonic)
    ranged: list[bool] = []  # per enqueue txn sent: did it range the entries?
    sent_as = create_within

    def recording(request: Any, creates: str, timeout: float) -> Any:
        ranged.append(any(op.request_range.key == queue.entries_prefix for op in request.success))
        return sent_as(request, creates, timeout)

    monkeypatch.setattr(steps, "create_within", recording)
    waiters: list[Waiter] = []

    def enqueue() -> Enqueued:
        waiter = Waiter(1, "test-waiter")
        queue.register(waiter)
        waiters.append(waiter)
        answer = run(queue.enqueue(waiter, deadline))
        assert isinstance(answer, Enqueued)
        return answer

    try:
        answers = [enqueue() for _ in range(nearest + 5)]
        # listed in the txn while short; the first to find it longer tells the next ones
        assert ranged == [True] * (nearest + 2) + [False] * 3
        tokens = [a.me.order for a in answers]
        for answer in answers[nearest + 2 :]:
            mine = answer.me.order
            assert (
                sorted(e.order for e in answer.lower) == [t for t in tokens if t < mine][-nearest:]
            )
            assert not answer.lower_complete and answer.later_entries
        # the queue short again: one more enqueue reads outside its txn and finds it so,
        # the next lists in its txn again, whole
        for waiter in waiters[1:]:
            run(queue.abandon_entry(waiter))
            queue.unregister(waiter)
        del waiters[1:]
        first, second = enqueue(), enqueue()
        assert ranged[-2:] == [False, True]
        assert [e.order for e in first.lower] == [tokens[0]] and first.lower_complete
        assert sorted(e.order for e in second.lower) == [tokens[0], first.me.order]
        assert second.lower_complete and not second.later_entries
    finally:
        for waiter in waiters:
            run(queue.abandon_entry(waiter))
            queue.unregister(waiter)
    assert ed.entries() == []


def test_a_burst_of_enqueues_leaves_the_entries_range_out_of_their_txns(
    ed: EtcdHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks of one loop enqueueing at once build their txns before any reply says the
    queue is long: each put the range in its txn, and tens of thousands of them held
    etcd's apply (which lease renewals wait for) until the leases ended. With as many
    creates of the process on their way as the txn would list, an enqueue leaves the
    range out; the waiters are still granted in the order of their entries. No txn's
    failure branch (a retry's) lists the queue either: at the end of a long burst the
    retries of txns that timed out did, each in etcd's apply loop."""
    nearest = nearest_needed(1) + 1  # what the txn lists (+ 1: ours)
    burst = 120
    ranged: list[bool] = []  # per enqueue txn sent: did it range the entries?
    listing_on_failure: list[bool] = []  # and its failure branch?
    sent_as = create_within

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("burst-txn", capacity=1)
            holder = await sem.acquire(timeout=10)
            keys = sem._store  # (opened by the first acquire)
            assert isinstance(keys, SemaphoreKeys)

            def recording(request: Any, creates: str, timeout: float) -> Any:
                prefix = keys.entries_prefix
                ranged.append(any(op.request_range.key == prefix for op in request.success))
                # the branch a retry after a lost reply takes reads its key, not the queue
                listing_on_failure.append(
                    any(op.request_range.key == prefix for op in request.failure)
                )
                return sent_as(request, creates, timeout)

            monkeypatch.setattr(steps, "create_within", recording)
            granted: list[int] = []

            async def one() -> None:
                async with sem.acquire(timeout=60) as permit:
                    granted.append(permit.token)

            tasks = [asyncio.ensure_future(one()) for _ in range(burst)]
            loop = asyncio.get_running_loop()
            end = loop.time() + 60
            while len(ed.entries("burst-txn")) < burst + 1:
                assert loop.time() < end, "the burst's entries were not all made"
                await asyncio.sleep(0.05)
            await holder.release()
            await asyncio.gather(*tasks)
            assert granted == sorted(granted)  # FIFO, by the entries' tokens

    asyncio.run(asyncio.wait_for(main(), 120))
    assert len(ranged) == burst
    assert ranged.count(True) <= nearest, ranged
    assert not any(listing_on_failure)
    assert ed.entries() == []
