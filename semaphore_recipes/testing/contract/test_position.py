"""``acquire(on_position=...)``: a waiting acquire is told where it stands (waiting
entries and permits ahead, the holders), and the figures move as the queue does, on
every backend and both faces; an acquire that does not ask reads nothing more."""

from __future__ import annotations

import queue
import threading
import time

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness

INTERVAL = 0.05
PATIENCE = 15.0  # seconds for a report to show a change


def _next_matching(reports: queue.Queue[sr.Position], wanted: tuple[int, int, int]) -> sr.Position:
    """The first report whose (entries ahead, permits ahead, holders) is ``wanted``."""
    end = time.monotonic() + PATIENCE
    seen = []
    while time.monotonic() < end:
        try:
            position = reports.get(timeout=0.1)
        except queue.Empty:
            continue
        seen.append((position.entries_ahead, position.permits_ahead, position.holders))
        if seen[-1] == wanted:
            return position
    raise AssertionError(f"no report of {wanted} (entries, permits ahead, holders): {seen}")


def test_position_moves_as_holders_release_and_waiters_ahead_are_granted(
    service: Harness,
) -> None:
    holding = service.connect()
    sem = holding.semaphore("pos", capacity=3)
    holders = [sem.acquire() for _ in range(3)]
    ahead_backend = service.connect()
    ahead_sem = ahead_backend.semaphore("pos", capacity=3)
    got_ahead: list[object] = []
    ahead = threading.Thread(target=lambda: got_ahead.append(ahead_sem.acquire(2, timeout=30)))
    ahead.start()
    deadline = time.monotonic() + PATIENCE
    while len(sem.status().waiters) < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    reports: queue.Queue[sr.Position] = queue.Queue()
    waiting = service.connect().semaphore("pos", capacity=3)
    got: list[object] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            waiting.acquire(3, timeout=30, on_position=reports.put, position_interval=INTERVAL)
        )
    )
    waiter.start()
    try:
        first = _next_matching(reports, (1, 2, 3))
        assert (first.permits_held, first.capacity) == (3, 3)
        assert first.waited >= 0
        holders.pop().release()
        holders.pop().release()  # 1 holder left: the 2-permit acquire ahead is granted
        ahead.join(PATIENCE)
        assert got_ahead, "the acquire ahead was not granted"
        later = _next_matching(reports, (0, 0, 2))
        assert later.permits_held == 3
        assert later.waited > first.waited
        holders.pop().release()
        assert not got, "granted while 2 of its 3 permits were held"
        _next_matching(reports, (0, 0, 1))
        got_ahead.pop().release()  # type: ignore[attr-defined]
        waiter.join(PATIENCE)
        assert got, "not granted once every permit was free"
        got.pop().release()  # type: ignore[attr-defined]
    finally:
        for permit in holders + got_ahead + got:
            permit.release()  # type: ignore[attr-defined]
        ahead.join(PATIENCE)
        waiter.join(PATIENCE)


def test_position_arguments_are_checked_before_any_io(service: Harness) -> None:
    sem = service.connect().semaphore("pos-args", capacity=1)
    with pytest.raises(TypeError):
        sem.acquire(on_position="not callable")  # type: ignore[arg-type]
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError):
            sem.acquire(on_position=print, position_interval=bad)
    assert sem.status().waiters == ()
