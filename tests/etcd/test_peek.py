"""etcd's Peek: a head's read of the entries it would watch, with no watch set
(``Capabilities.peek_before_arming``): one txn, states as an Arm's, no event after."""

from __future__ import annotations

import time

from semaphore_recipes._core.program import run_program
from semaphore_recipes._core.protocol import Peek
from semaphore_recipes._core.queue import EntryState
from semaphore_recipes.etcd.backend import EtcdBackend
from semaphore_recipes.etcd.rpc import Call
from semaphore_recipes.testing.etcd_harness import EtcdHarness

from .waiting import enqueued_by_hand


def test_etcd_declares_it() -> None:
    assert EtcdBackend.capabilities.peek_before_arming


def test_a_peek_reads_in_one_request_and_watches_nothing(ed: EtcdHarness) -> None:
    """Capacity 2: two holders and an entry that left; the waiter's peek says which is
    which in one txn, and the holders' releases afterwards tell it nothing."""
    holders = ed.connect().semaphore("peeked", capacity=2)
    first = holders.acquire()
    gone = holders.acquire()
    gone_key = gone.key
    gone.release()
    second = holders.acquire()
    with enqueued_by_hand(ed, "peeked", capacity=2) as by_hand:
        asked: list[object] = []

        def answer(request: object) -> object:
            asked.append(request)
            return by_hand.runner.answer(request)

        keys = (first.key, gone_key, second.key)
        step = by_hand.queue.step(by_hand.waiter, Peek(keys), by_hand.deadline)
        assert run_program(step, answer) == {
            first.key: EntryState(held=False),
            gone_key: None,
            second.key: EntryState(held=False),
        }
        assert len(asked) == 1 and isinstance(asked[0], Call)  # one txn, no AwaitCreated
        first.release()
        second.release()
        time.sleep(0.3)  # a watch's event would be here by now (same machine)
        assert by_hand.waiter.events == []
