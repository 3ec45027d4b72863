"""decide() against a brute-force model, on views that are supersets of the truth."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from semaphore_recipes._core.queue import (
    MAX_MARK_KEYS,
    Admitted,
    Entry,
    EntryState,
    QueuePosition,
    Wait,
    decide,
)

weights = st.integers(min_value=1, max_value=5)


@st.composite
def queues(draw: st.DrawFn) -> tuple[list[Entry], list[Entry], int, int]:
    """(true lower entries, a view = truth plus deleted extras, my weight, capacity)."""
    n = draw(st.integers(0, 8))
    entries = [
        Entry(key=f"k{i}", order=i, weight=draw(weights), held=draw(st.booleans()))
        for i in range(n)
    ]
    alive = [draw(st.booleans()) for _ in entries]
    truth = [e for e, a in zip(entries, alive, strict=True) if a]
    # held flags in a view are never ahead of the truth: a view may not know a mark yet
    view = [Entry(e.key, e.order, e.weight, e.held and draw(st.booleans())) for e in entries]
    return truth, view, draw(weights), draw(st.integers(1, 12))


def brute_force_admitted(lower: list[Entry], weight: int, capacity: int) -> bool:
    return sum(e.weight for e in lower) + weight <= capacity


@given(queues())
def test_admission_is_the_prefix_rule(q: tuple[list[Entry], list[Entry], int, int]) -> None:
    truth, _view, weight, capacity = q
    assert isinstance(decide(truth, weight, capacity), Admitted) == brute_force_admitted(
        truth, weight, capacity
    )


@given(queues())
def test_a_superset_view_never_over_admits(q: tuple[list[Entry], list[Entry], int, int]) -> None:
    truth, view, weight, capacity = q
    if isinstance(decide(view, weight, capacity), Admitted):
        assert brute_force_admitted(truth, weight, capacity)


@given(queues())
def test_who_watches_whom(q: tuple[list[Entry], list[Entry], int, int]) -> None:
    _truth, view, weight, capacity = q
    d = decide(view, weight, capacity)
    assume(isinstance(d, Wait))
    assert isinstance(d, Wait)
    if not view:
        assert d.watch == () and d.head
        return
    pred = view[-1]
    is_head = pred.held or sum(e.weight for e in view) <= capacity
    assert d.head == is_head
    if is_head:  # holders release in any order: every lower entry can admit the head
        assert d.watch == tuple(e.key for e in view)
    else:  # only the predecessor's exit or admission can change anything for us
        assert d.watch == (pred.key,)


def test_out_of_order_release_wakes_the_head() -> None:
    # N=2: holders h0, h1; waiter w2 must watch h0 too, not only its predecessor h1.
    h0, h1 = Entry("h0", 0, 1, held=True), Entry("h1", 1, 1, held=True)
    d = decide([h0, h1], 1, 2)
    assert isinstance(d, Wait) and d.head and set(d.watch) == {"h0", "h1"}


def test_position_tracks_armed_watches_and_deletions() -> None:
    me = Entry("me", 10, 1)
    pos = QueuePosition(me, [Entry("a", 1, 1), Entry("b", 2, 1)], capacity=1)
    d = pos.decision()
    assert isinstance(d, Wait) and not d.head and pos.keys_to_arm(d) == ("b",)
    pos.armed("b", EntryState(held=False))
    assert pos.keys_to_arm(d) == ()
    pos.armed("a", None)  # gone when read: dropped, never armed
    assert [e.key for e in pos.lower] == ["b"]
    pos.marked_held("b")  # fired: b is held now, and its watch is spent
    d = pos.decision()
    assert isinstance(d, Wait) and d.head and pos.keys_to_arm(d) == ("b",)
    pos.deleted("b")
    assert isinstance(pos.decision(), Admitted)


def test_a_held_mark_prunes_what_its_holder_knew_was_gone() -> None:
    lower = [Entry(f"k{i}", i, 1) for i in range(6)]
    pos = QueuePosition(Entry("me", 10, 1), lower, capacity=2)
    # k5 was admitted with only k4 below it still alive: k0..k3 are gone for good
    pos.armed("k5", EntryState(held=True, lower=("k4",)))
    assert [e.key for e in pos.lower] == ["k4", "k5"]
    d = pos.decision()
    assert isinstance(d, Wait) and d.head and pos.keys_to_arm(d) == ("k4",)


def test_position_rejects_entries_not_lower() -> None:
    import pytest

    with pytest.raises(ValueError):
        QueuePosition(Entry("me", 1, 1), [Entry("x", 2, 1)], 3)


def test_a_predecessor_gone_unseen_makes_the_view_stale_only_for_a_non_head() -> None:
    lower = [Entry(f"k{i}", i, 1) for i in range(5)]
    pos = QueuePosition(Entry("me", 10, 1), lower, capacity=2)
    pos.deleted("k4")  # we watched only k4; k0..k3 may all be gone by now
    assert pos.stale
    pos.relisted([Entry("k3", 3, 1)])
    assert not pos.stale and [e.key for e in pos.lower] == ["k3"]
    head = QueuePosition(Entry("me", 10, 1), [Entry("a", 1, 1)], capacity=2)
    head.deleted("a")  # a head watches every lower entry: nothing to re-list
    assert not head.stale


def test_an_admitted_predecessor_gone_before_its_mark_was_read_makes_the_view_stale() -> None:
    lower = [Entry(f"k{i}", i, 1) for i in range(5)]
    pos = QueuePosition(Entry("me", 10, 1), lower, capacity=2)
    pos.marked_held("k4")  # k4 was admitted: at most 1 of k0..k3 can still be there
    pos.deleted("k4")  # and it left before we read its mark's view
    assert pos.stale  # one listing, not a probe per entry
    pruned = QueuePosition(Entry("me", 10, 1), lower, capacity=2)
    pruned.armed("k4", EntryState(held=True, lower=("k3",)))  # its mark's view prunes ours
    pruned.deleted("k4")
    assert not pruned.stale and [e.key for e in pruned.lower] == ["k3"]


def test_a_mark_carried_by_a_lasting_watch_needs_no_read() -> None:
    from semaphore_recipes._core.protocol import EntryMarked, apply_event

    lower = [Entry(f"k{i}", i, 1) for i in range(6)]
    pos = QueuePosition(Entry("me", 10, 1), lower, capacity=2)
    pos.armed("k5", EntryState(held=False))  # watching our predecessor
    apply_event(pos, EntryMarked("k5", ("k4",)))  # etcd: the event carries the mark
    assert [e.key for e in pos.lower] == ["k4", "k5"]  # pruned as a read would
    d = pos.decision()
    assert isinstance(d, Wait) and d.head and pos.keys_to_arm(d) == ("k4",)  # k5 still armed


def test_a_waiter_far_back_keeps_only_its_nearest_entries() -> None:
    """10,000 waiters must not each hold (and sum at every event) the whole queue: the
    view keeps the nearest entries whose weights pass the capacity. Such a view never
    admits: a decision that could, or that makes us the head, lists afresh first."""
    lower = [Entry(f"k{i}", i, 1) for i in range(1000)]
    pos = QueuePosition(Entry("me", 2000, 1), lower, capacity=3)
    assert [e.key for e in pos.lower] == [f"k{i}" for i in range(1000 - MAX_MARK_KEYS, 1000)]
    assert pos.truncated and not pos.stale  # not admissible; watches its predecessor
    assert pos.decision() == Wait(watch=("k999",), head=False)
    pos.marked_held("k999")  # the predecessor is admitted: we are the head
    assert not pos.stale  # first its held mark, which may make the view whole:
    assert pos.keys_to_arm(pos.decision()) == ("k999",)  # type: ignore[arg-type]
    pos.armed("k999", EntryState(held=True, lower=None))  # (too long to record)
    assert pos.stale  # it did not: a head watches every lower entry, it needs all of them
    pos.relisted([Entry("k998", 998, 1), Entry("k999", 999, 1)])  # the others are gone
    assert not pos.stale and not pos.truncated
    assert pos.decision() == Admitted()


def test_a_partial_listing_never_admits_and_a_mark_can_complete_it() -> None:
    near = [Entry("k8", 8, 1), Entry("k9", 9, 1)]
    pos = QueuePosition(Entry("me", 20, 1), near, capacity=3, complete=False)
    assert pos.truncated and pos.stale  # 2 + 1 <= 3 would admit: not from a partial view
    # k9's held mark records its view when admitted: k8 alone. Older entries we were
    # not shown are in that view or gone, and we hold all of it: the view is whole.
    pos.armed("k9", EntryState(held=True, lower=("k8",)))
    assert not pos.truncated and not pos.stale
    assert pos.decision() == Admitted()


def test_a_predecessor_gone_unseen_whose_admitted_view_is_known_needs_no_listing() -> None:
    """10,000 waiters in one process, 1 ms holds: a waiter's predecessor is admitted and
    gone before its mark is read, at nearly every grant. Their driver kept the view it
    was admitted with (``EntryDeleted.admitted_view``, ``EntryState.left_view``): it
    prunes ours as the mark would have, and what our truncated view left out (here k0,
    a long holder) is taken from it: no fresh listing (on ZooKeeper, of the whole
    queue) is needed."""
    from semaphore_recipes._core.protocol import EntryDeleted, apply_event

    lower = [Entry(f"k{i}", i, 1) for i in range(1000)]
    unknown = QueuePosition(Entry("me", 2000, 1), lower, capacity=3)
    apply_event(unknown, EntryDeleted("k999"))  # watched alone, gone unseen: no view
    assert unknown.stale

    admitted_with = (Entry("k0", 0, 1, held=True), Entry("k998", 998, 1))
    for answer in ("event", "read"):
        pos = QueuePosition(Entry("me", 2000, 1), lower, capacity=3)
        assert pos.truncated and pos.decision() == Wait(watch=("k999",), head=False)
        if answer == "event":  # the watch told us of its deletion
            apply_event(pos, EntryDeleted("k999", admitted_view=admitted_with))
        else:  # the read arming it found it gone
            pos.armed("k999", EntryState(held=True, left_view=admitted_with))
        assert not pos.stale and not pos.truncated
        assert [e.key for e in pos.lower] == ["k0", "k998"]
        assert pos.decision() == Admitted()  # 1 + 1 + 1 <= 3
