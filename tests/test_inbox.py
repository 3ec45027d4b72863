"""The waiters' inbox (``semaphore_recipes._inbox``): a timed take never waits past its
deadline, whatever happens between its first look and its wait."""

from __future__ import annotations

import itertools
import queue
import threading
import time

import pytest

from semaphore_recipes._inbox import Inbox


def test_items_come_out_in_the_order_they_went_in() -> None:
    inbox: Inbox[int] = Inbox()
    for i in range(5):
        inbox.put(i)
    assert [inbox.get_nowait(), inbox.get(timeout=0), inbox.get(), inbox.get(1.0)] == [0, 1, 2, 3]
    assert inbox.get_nowait() == 4
    with pytest.raises(queue.Empty):
        inbox.get_nowait()


def test_a_deadline_passed_before_the_wait_is_empty_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hang this module exists for: the thread loses the CPU between the deadline's
    start and the wait, longer than the timeout (queue.SimpleQueue before 3.13 then
    waits with a negative time, for good). Here the clock jumps by a second there."""
    ticks = itertools.count()
    monkeypatch.setattr("semaphore_recipes._inbox.monotonic", lambda: float(next(ticks)))
    inbox: Inbox[int] = Inbox()
    inbox.put(1)
    inbox.get_nowait()  # (empty again: SimpleQueue's lock was left free in this state)
    outcome: list[object] = []

    def take() -> None:
        try:
            outcome.append(inbox.get(timeout=0.5))
        except queue.Empty as exc:
            outcome.append(exc)

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    taker.join(5)
    assert not taker.is_alive(), "a timed get waited past its deadline"
    assert len(outcome) == 1 and isinstance(outcome[0], queue.Empty)


def test_tiny_timeouts_on_an_empty_inbox_all_end() -> None:
    inbox: Inbox[int] = Inbox()
    done = threading.Event()

    def takes() -> None:
        for i in range(3000):
            inbox.put(i)
            inbox.get_nowait()
            with pytest.raises(queue.Empty):
                inbox.get(timeout=1e-6 * (i % 30))
        done.set()

    threading.Thread(target=takes, daemon=True).start()
    assert done.wait(30), "a timed get of a few microseconds did not end"


def test_a_put_wakes_a_waiting_get() -> None:
    inbox: Inbox[str] = Inbox()
    got: list[str] = []
    taker = threading.Thread(target=lambda: got.append(inbox.get(timeout=30)), daemon=True)
    untimed = threading.Thread(target=lambda: got.append(inbox.get()), daemon=True)
    taker.start()
    untimed.start()
    time.sleep(0.05)  # (both waiting, most likely; the result is the same if not)
    inbox.put("a")
    inbox.put("b")
    taker.join(5)
    untimed.join(5)
    assert sorted(got) == ["a", "b"]


def test_a_stale_ring_does_not_end_a_wait_early() -> None:
    """An item taken without waiting leaves its put's ring behind: the next timed take
    still waits its time, then finds nothing."""
    inbox: Inbox[int] = Inbox()
    inbox.put(1)
    assert inbox.get_nowait() == 1
    started = time.monotonic()
    with pytest.raises(queue.Empty):
        inbox.get(timeout=0.2)
    assert time.monotonic() - started >= 0.2


def test_items_put_by_many_threads_reach_many_takers_once_each() -> None:
    """Several takers waiting at once: puts that come together (one ring for several)
    still wake a taker per item; none is lost or taken twice."""
    inbox: Inbox[int] = Inbox()
    per_putter, putters, takers = 500, 4, 3
    taken: list[int] = []
    lock = threading.Lock()

    def take() -> None:  # (untimed: a lost wake-up would leave it waiting for good)
        while (item := inbox.get()) >= 0:
            with lock:
                taken.append(item)

    def put(first: int) -> None:
        for i in range(first, first + per_putter):
            inbox.put(i)

    threads = [threading.Thread(target=take) for _ in range(takers)]
    threads += [threading.Thread(target=put, args=(k * per_putter,)) for k in range(putters)]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads[takers:]:
        thread.join(30)
    for _ in range(takers):
        inbox.put(-1)  # (each taker's last)
    for thread in threads[:takers]:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a taker was not woken"
    assert sorted(taken) == list(range(per_putter * putters))
