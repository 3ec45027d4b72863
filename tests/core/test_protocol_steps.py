"""The acquire protocol's steps driven by hand: one try for a deadline that has passed,
which enqueue is the first try, and a backend that failed."""

from __future__ import annotations

import pytest

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import (
    Arm,
    AwaitEvent,
    BackendFailed,
    Enqueue,
    Enqueued,
    MarkHeld,
    SessionLost,
    acquire_protocol,
)
from semaphore_recipes._core.queue import Entry, EntryState
from semaphore_recipes.errors import AcquireTimeout, BackendUnavailable

ME = Entry(key="me", order=5, weight=1)
HOLDER = Entry(key="holder", order=1, weight=2)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_zero_deadline_still_gets_the_first_reply_and_is_admitted() -> None:
    protocol = acquire_protocol("s", 1, Deadline(0, Clock()))
    step = next(protocol)
    assert step == Enqueue(first=True)
    step = protocol.send(Enqueued(ME, (), capacity=2, later_entries=False, capacity_version=1))
    assert isinstance(step, MarkHeld)
    with pytest.raises(StopIteration) as done:
        protocol.send(None)
    assert done.value.value == ME


def test_a_passed_deadline_raises_before_arming_a_watch() -> None:
    clock = Clock()
    protocol = acquire_protocol("s", 1, Deadline(0.5, clock))
    next(protocol)
    clock.now += 1.0  # the enqueue's reply came after the deadline
    with pytest.raises(AcquireTimeout):
        protocol.send(Enqueued(ME, (HOLDER,), capacity=2, later_entries=False, capacity_version=1))


def test_only_the_first_enqueue_is_the_first_try() -> None:
    clock = Clock()
    protocol = acquire_protocol("s", 1, Deadline(10, clock))
    assert next(protocol) == Enqueue(first=True)
    step = protocol.send(
        Enqueued(ME, (HOLDER,), capacity=2, later_entries=False, capacity_version=1)
    )
    assert isinstance(step, Arm)
    step = protocol.send({"holder": EntryState(held=True)})
    assert isinstance(step, AwaitEvent)
    assert protocol.send(SessionLost()) == Enqueue(first=False)


def test_a_failed_backend_ends_the_wait() -> None:
    protocol = acquire_protocol("s", 1, Deadline(None, Clock()))
    next(protocol)
    protocol.send(Enqueued(ME, (HOLDER,), capacity=2, later_entries=False, capacity_version=1))
    protocol.send({"holder": EntryState(held=True)})
    with pytest.raises(BackendUnavailable, match="client died"):
        protocol.send(BackendFailed("client died"))
