"""The acquire protocol's steps driven by hand: one try for a deadline that has passed,
which enqueue is the first try, and a backend that failed."""

from __future__ import annotations

import pytest

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import (
    Arm,
    AwaitEvent,
    BackendFailed,
    CapacityChanged,
    Enqueue,
    Enqueued,
    MarkHeld,
    SessionLost,
    StoreAdmitted,
    acquire_protocol,
)
from semaphore_recipes._core.queue import Entry, EntryState
from semaphore_recipes._core.slots import ListSlots, Slot
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


def test_where_the_store_decides_an_empty_answer_not_admitted_waits_for_its_word() -> None:
    """server_admission: no Arm, no Relist; an answer listing nothing before us that is
    no admission (our weight above a capacity lowered meanwhile) waits, ignores the
    other events, and is admitted by StoreAdmitted for our own entry."""
    clock = Clock()
    protocol = acquire_protocol("s", 2, Deadline(10, clock), server_admission=True)
    assert next(protocol) == Enqueue(first=True)
    me = Entry(key="me", order=5, weight=2)
    answer = Enqueued(me, (), capacity=1, later_entries=False, capacity_version=1)
    assert protocol.send(answer) == AwaitEvent(10)
    assert isinstance(protocol.send(CapacityChanged(2, 2)), AwaitEvent)
    assert isinstance(protocol.send(StoreAdmitted("another")), AwaitEvent)
    assert protocol.send(None) == AwaitEvent(10)  # a tick: the deadline is checked
    step = protocol.send(StoreAdmitted("me"))
    assert step == MarkHeld(me, now=False, lower=None)
    with pytest.raises(StopIteration) as done:
        protocol.send(None)
    assert done.value.value == me


def test_where_the_store_decides_its_answer_admits_and_a_session_loss_enqueues_again() -> None:
    protocol = acquire_protocol("s", 1, Deadline(None, Clock()), server_admission=True)
    next(protocol)
    waiting = Enqueued(ME, (HOLDER,), capacity=2, later_entries=False, capacity_version=1)
    assert isinstance(protocol.send(waiting), AwaitEvent)
    assert protocol.send(SessionLost()) == Enqueue(first=False)
    admitted = Enqueued(ME, (), capacity=2, later_entries=True, capacity_version=1, admitted=True)
    assert isinstance(protocol.send(admitted), MarkHeld)


def test_slots_given_with_the_admission_take_no_slot_step() -> None:
    """A store that decides slots in the admitting write (``Enqueued.slots``,
    ``StoreAdmitted.slots``): MarkHeld carries them, no ListSlots/TakeSlot comes; an
    admission without them (None) takes them after it, as on the other stores."""
    given = (Slot(0, 7), Slot(1, 8))
    me = Entry(key="me", order=5, weight=2)
    protocol = acquire_protocol("s", 2, Deadline(None, Clock()), slots=True, server_admission=True)
    next(protocol)
    answer = Enqueued(
        me, (), 2, later_entries=False, capacity_version=1, admitted=True, slots=given
    )
    assert protocol.send(answer) == MarkHeld(me, now=False, lower=None, slots=given)

    protocol = acquire_protocol("s", 2, Deadline(None, Clock()), slots=True, server_admission=True)
    next(protocol)
    waiting = Enqueued(me, (HOLDER,), capacity=2, later_entries=False, capacity_version=1)
    assert isinstance(protocol.send(waiting), AwaitEvent)
    step = protocol.send(StoreAdmitted("me", slots=given))
    assert step == MarkHeld(me, now=False, lower=None, slots=given)

    protocol = acquire_protocol("s", 2, Deadline(None, Clock()), slots=True, server_admission=True)
    next(protocol)
    assert isinstance(protocol.send(waiting), AwaitEvent)
    assert protocol.send(StoreAdmitted("me")) == ListSlots()  # not decided: taken after
