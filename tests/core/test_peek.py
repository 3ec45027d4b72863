"""A head reads the entries it would watch before watching them (``peek_first``: a
store whose watch costs a round trip before its read, etcd), and arms only those the
read leaves in its way; once per entry of ours, and never without the flag."""

from __future__ import annotations

import time
from collections.abc import Generator

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import (
    Arm,
    AwaitEvent,
    Enqueue,
    Enqueued,
    MarkHeld,
    Peek,
    SessionLost,
    Step,
    acquire_protocol,
)
from semaphore_recipes._core.queue import Entry, EntryState

LOWER = tuple(Entry(key=k, order=i, weight=1) for i, k in enumerate("ABCP", start=1))
ME = Entry(key="me", order=9, weight=1)
HELD = EntryState(held=True)


def behind_a_marked_predecessor(peek_first: bool) -> tuple[Generator[Step, object, Entry], Step]:
    """Capacity 3 behind A, B, C and P: we watch P, whose mark says it was admitted
    with A, B and C before it. Returns the step that follows."""
    protocol = acquire_protocol("s", 1, Deadline(None, time.monotonic), peek_first=peek_first)
    assert next(protocol) == Enqueue(first=True)
    step = protocol.send(Enqueued(ME, LOWER, capacity=3, later_entries=False, capacity_version=1))
    assert step == Arm(("P",))  # not the head: the predecessor only
    step = protocol.send({"P": EntryState(held=True, lower=("A", "B", "C"))})
    return protocol, step


def test_a_head_whose_view_is_gone_is_admitted_by_the_read_alone() -> None:
    protocol, step = behind_a_marked_predecessor(peek_first=True)
    assert step == Peek(("A", "B", "C"))
    step = protocol.send({"A": None, "B": None, "C": HELD})
    assert isinstance(step, MarkHeld)  # C, P and us: 3 of 3, and no watch was set
    assert step.lower == ("C", "P")


def test_a_head_arms_only_what_the_read_left_in_its_way() -> None:
    protocol, step = behind_a_marked_predecessor(peek_first=True)
    assert step == Peek(("A", "B", "C"))
    step = protocol.send({"A": None, "B": HELD, "C": HELD})
    assert step == Arm(("B", "C"))
    step = protocol.send({"B": HELD, "C": None})  # C left between the two reads
    assert isinstance(step, MarkHeld)


def test_a_head_peeks_once_per_entry_of_ours() -> None:
    protocol, step = behind_a_marked_predecessor(peek_first=True)
    assert step == Peek(("A", "B", "C"))
    step = protocol.send({"A": HELD, "B": HELD, "C": HELD})
    assert step == Arm(("A", "B", "C"))
    step = protocol.send({"A": HELD, "B": HELD, "C": HELD})
    assert isinstance(step, AwaitEvent)


def test_without_the_flag_a_head_arms_at_once() -> None:
    _, step = behind_a_marked_predecessor(peek_first=False)
    assert step == Arm(("A", "B", "C"))


def test_a_head_arming_one_entry_does_not_peek() -> None:
    protocol = acquire_protocol("s", 1, Deadline(None, time.monotonic), peek_first=True)
    next(protocol)
    lower = (Entry("A", 1, 1), Entry("P", 2, 1))
    step = protocol.send(Enqueued(ME, lower, capacity=2, later_entries=False, capacity_version=1))
    assert step == Arm(("P",))
    assert protocol.send({"P": EntryState(held=True, lower=("A",))}) == Arm(("A",))


def test_a_session_lost_during_the_read_enqueues_again() -> None:
    protocol, step = behind_a_marked_predecessor(peek_first=True)
    assert isinstance(step, Peek)
    assert protocol.send(SessionLost()) == Enqueue(first=False)


def test_a_mark_read_by_the_peek_prunes_the_view_as_an_arm_does() -> None:
    """C's mark says it was admitted with B alone before it: A is gone."""
    protocol, step = behind_a_marked_predecessor(peek_first=True)
    step = protocol.send({"A": HELD, "B": HELD, "C": EntryState(held=True, lower=("B",))})
    assert step == Arm(("B", "C"))
