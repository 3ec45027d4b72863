"""The checker's self-test: planted violations must be flagged, and the clean variants
of the same histories must not be."""

from __future__ import annotations

from collections.abc import Sequence

from chaos.checker import END, QUIESCED, CheckParams, check
from chaos.model import (
    CapacitySet,
    ClientOp,
    DeleteCause,
    EntryCreated,
    EntryDeleted,
    EntryGranted,
    Fault,
    FaultKind,
    FencedWrite,
    HistoryEvent,
    LeaderChange,
    Marker,
    OpKind,
    Outcome,
    ViolationKind,
)

PARAMS = CheckParams(session_timeout=2.0)


def created(pos: int, key: str, weight: int = 1, owner: str = "c0.0") -> EntryCreated:
    return EntryCreated(pos, float(pos), key, pos, weight, owner, 7)


def deleted(
    pos: int, key: str, token: int, cause: DeleteCause = DeleteCause.DELETE
) -> EntryDeleted:
    return EntryDeleted(pos, float(pos), key, token, cause)


def write(pos: int, key: str, token: int) -> FencedWrite:
    return FencedWrite(pos, float(pos), key, token, f"{key}-writer")


def grant(key: str, token: int, at: float, client: str = "c0.0") -> ClientOp:
    return ClientOp(client, 0, OpKind.ACQUIRE, at - 0.1, at, Outcome.OK, 10.0, key, token)


def kinds(
    history: list[HistoryEvent], ops: Sequence[ClientOp] = (), faults: Sequence[Fault] = ()
) -> list[ViolationKind]:
    return [v.kind for v in check(history, ops, faults, PARAMS).violations]


def test_a_clean_history_passes() -> None:
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(2, "a", 2),
        created(3, "b", 1),
        write(4, "a", 2),
        write(5, "b", 3),
        deleted(6, "a", 2),
        created(7, "c", 2),
        write(8, "c", 7),
        deleted(9, "b", 3),
        deleted(10, "c", 7),
        Marker(11, 11.0, QUIESCED),
        Marker(12, 12.0, END),
    ]
    ops = [grant("a", 2, 3.5), grant("b", 3, 4.5), grant("c", 7, 7.5)]
    assert kinds(history, ops) == []


def over_capacity_history() -> list[HistoryEvent]:
    return [
        CapacitySet(1, 1.0, 3),
        created(2, "a", 2),
        created(3, "b", 2),
        write(4, "a", 2),
        write(5, "b", 3),  # 2 + 2 > 3
    ]


def test_over_capacity_is_flagged() -> None:
    assert kinds(over_capacity_history()) == [ViolationKind.OVER_CAPACITY]


def test_a_capacity_shrink_under_a_holder_is_not_over_capacity() -> None:
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 4),
        created(2, "a", 2),
        created(3, "b", 2),
        CapacitySet(4, 4.0, 3),  # holders keep what they hold
        write(5, "b", 3),
    ]
    assert kinds(history) == []


def test_an_entry_created_after_a_capacity_shrink_is_bound_by_the_new_capacity() -> None:
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 4),
        created(2, "a", 2),
        CapacitySet(3, 3.0, 3),
        created(4, "b", 2),
        write(5, "b", 4),  # 2 + 2 > 3, and b never saw 4
    ]
    assert kinds(history) == [ViolationKind.OVER_CAPACITY]


def test_a_write_after_its_entry_was_deleted_is_flagged() -> None:
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(2, "a"),
        deleted(3, "a", 2, DeleteCause.SESSION_END),
        write(4, "a", 2),
    ]
    assert kinds(history) == [ViolationKind.WRITE_AFTER_DELETE]


def test_a_write_with_a_stale_token_on_a_reused_key_is_flagged() -> None:
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(2, "slot-0"),
        deleted(3, "slot-0", 2),
        created(4, "slot-0"),  # the key reused by a new entry
        write(5, "slot-0", 2),  # the old permit's write
    ]
    assert kinds(history) == [ViolationKind.WRITE_AFTER_DELETE]


def overtaking_history(gone_at: int, cause: DeleteCause = DeleteCause.DELETE) -> list[HistoryEvent]:
    return [
        CapacitySet(1, 1.0, 3),
        created(2, "f"),  # lower, waiting
        created(3, "e"),
        write(10, "e", 3),  # e admitted: f fitted too
        deleted(gone_at, "f", 2, cause),  # f gave up without a grant
        deleted(gone_at + 1, "e", 3),
    ]


def test_overtaking_is_flagged() -> None:
    assert kinds(overtaking_history(15), [grant("e", 3, 9.5)]) == [ViolationKind.OVERTAKING]


def test_overtaking_needs_the_lower_entry_to_outlive_the_grace() -> None:
    assert kinds(overtaking_history(11), [grant("e", 3, 9.5)]) == []


def test_a_lower_entry_gone_with_its_session_is_not_overtaken() -> None:
    history = overtaking_history(15, DeleteCause.SESSION_END)
    assert kinds(history, [grant("e", 3, 9.5)]) == []


def test_a_lower_entry_that_was_granted_is_not_overtaken() -> None:
    assert kinds(overtaking_history(15), [grant("e", 3, 9.5), grant("f", 2, 10.5)]) == []


def test_no_overtaking_is_judged_during_a_fault() -> None:
    fault = Fault(FaultKind.CUT, "c0.0", 11.0, 12.0)
    assert kinds(overtaking_history(15), [grant("e", 3, 9.5)], [fault]) == []


def test_entries_left_at_the_markers_are_leaks() -> None:
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(2, "a"),
        Marker(3, 3.0, QUIESCED),
        Marker(4, 4.0, END),
    ]
    assert kinds(history) == [ViolationKind.LEAK, ViolationKind.LEAK]
    history.insert(3, deleted(3, "a", 2))
    assert kinds(history) == [ViolationKind.LEAK]  # at the quiesced marker only


def test_a_live_lease_at_the_end_is_a_leak() -> None:
    result = check([CapacitySet(1, 1.0, 3)], [], [], PARAMS, live_leases=["abc"])
    assert [v.kind for v in result.violations] == [ViolationKind.LEAK]


def waiting(start: float, end: float, client: str = "c1.0") -> ClientOp:
    return ClientOp(client, 1, OpKind.ACQUIRE, start, end, Outcome.TIMEOUT, 100.0)


def test_a_stall_is_flagged() -> None:
    ops = [waiting(100.0, 103.0), waiting(103.0, 106.0), grant("x", 1, 101.0)]
    assert kinds([], ops) == [ViolationKind.STALL]  # 101 .. 106 without a grant


def test_waiting_with_grants_every_few_seconds_is_no_stall() -> None:
    ops = [waiting(100.0, 110.0)] + [grant("x", i, 100.0 + 3 * i) for i in range(1, 4)]
    assert kinds([], ops) == []


def test_an_acquire_cut_short_by_kill_9_stops_waiting_at_the_kill() -> None:
    dead = ClientOp("c1.0", 0, OpKind.ACQUIRE, 100.0, None, Outcome.UNFINISHED, 10.0)
    ops = [dead, grant("x", 1, 101.0), waiting(102.0, 103.0, "c2.0"), grant("y", 2, 130.0)]
    kill = Fault(FaultKind.KILL_CLIENT, "c1.0", 101.5, 101.5)
    assert kinds([], ops, [kill]) == []  # 110 .. 130: nobody was waiting
    assert kinds([], ops) == [ViolationKind.STALL, ViolationKind.UNBOUNDED_CALL]


def test_a_stall_during_a_fault_is_not_flagged() -> None:
    ops = [waiting(100.0, 106.0), grant("x", 1, 101.0)]
    assert kinds([], ops, [Fault(FaultKind.KILL_LEADER, "m0", 100.5, 101.0)]) == []


def test_a_slow_release_after_kill_9_is_flagged() -> None:
    kill = Fault(FaultKind.KILL_CLIENT, "c1.0", 100.0, 100.0)
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(50, "a", owner="c1.0"),
        deleted(104, "a", 50, DeleteCause.SESSION_END),  # 4 s > 2 + 1
    ]
    assert kinds(history, [], [kill]) == [ViolationKind.SLOW_RELEASE]
    history[2] = EntryDeleted(102, 102.5, "a", 50, DeleteCause.SESSION_END)
    result = check(history, [], [kill], PARAMS)
    assert result.violations == [] and result.release_latencies == [2.5]


def test_a_slow_release_overlapping_a_server_fault_is_not_judged() -> None:
    faults = [
        Fault(FaultKind.KILL_CLIENT, "c1.0", 100.0, 100.0),
        Fault(FaultKind.KILL_MEMBER, "m1", 101.0, 102.0),
    ]
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(50, "a", owner="c1.0"),
        deleted(104, "a", 50, DeleteCause.SESSION_END),
    ]
    assert kinds(history, [], faults) == []


def test_calls_past_their_bound_or_never_returning_are_flagged() -> None:
    slow = ClientOp("c0.0", 0, OpKind.COMMIT, 10.0, 20.0, Outcome.UNAVAILABLE, 5.0)
    hung = ClientOp("c0.0", 1, OpKind.RELEASE, 10.0, None, Outcome.UNFINISHED, 5.0)
    killed = ClientOp("c1.0", 1, OpKind.RELEASE, 10.0, None, Outcome.UNFINISHED, 5.0)
    paused = ClientOp("c2.0", 0, OpKind.COMMIT, 10.0, 20.0, Outcome.LOST, 5.0)
    faults = [
        Fault(FaultKind.KILL_CLIENT, "c1.0", 11.0, 11.0),
        Fault(FaultKind.PAUSE_CLIENT, "c2.0", 11.0, 14.0),
    ]
    assert kinds([], [slow, hung, killed, paused], faults) == [
        ViolationKind.UNBOUNDED_CALL,
        ViolationKind.UNBOUNDED_CALL,
    ]


def test_an_unexpected_exception_is_flagged() -> None:
    op = ClientOp("c0.0", 0, OpKind.ACQUIRE, 10.0, 11.0, Outcome.ERROR, 5.0, detail="KeyError")
    assert kinds([], [op]) == [ViolationKind.UNEXPECTED_ERROR]


def test_an_acknowledged_write_missing_from_the_history_is_flagged() -> None:
    history: list[HistoryEvent] = [CapacitySet(1, 1.0, 3), created(2, "a"), write(3, "a", 2)]
    ok = ClientOp("c0.0", 0, OpKind.COMMIT, 2.5, 3.5, Outcome.OK, 5.0, "a", 2)
    assert kinds(history, [ok]) == []
    assert kinds(history, [ok, ok]) == [ViolationKind.LOST_WRITE]


# Overlapping faults (the storm mode, chaos/storm.py): faults on different clients overlap,
# a server fault overlaps client faults.


def stall_spans(ops: Sequence[ClientOp], faults: Sequence[Fault]) -> list[str]:
    return [
        v.detail.split("(")[1].split(")")[0]
        for v in check([], ops, faults, PARAMS).violations
        if v.kind is ViolationKind.STALL
    ]


def test_a_stall_is_judged_only_after_the_last_of_overlapping_faults_healed() -> None:
    # c1 cut 110 .. 120; c2 paused 112 .. 115 inside it (starts later, heals first): the
    # fault-free time starts at 120 + recovery (2 * 2 s + 2 s), not at 115 + recovery.
    faults = [
        Fault(FaultKind.CUT, "c1.0", 110.0, 120.0),
        Fault(FaultKind.PAUSE_CLIENT, "c2.0", 112.0, 115.0),
    ]
    ops = [waiting(100.0, 140.0, "c3.0")] + [grant("x", i, 100.0 + 3 * i) for i in range(1, 4)]
    assert stall_spans(ops, faults) == ["126.000 .. 140.000"]
    # and nothing is judged while they overlap: a grant at 139 leaves 13 s, then 1 s
    assert stall_spans([*ops, grant("y", 9, 139.0)], faults) == ["126.000 .. 139.000"]


def test_a_quiet_gap_between_storm_faults_is_judged() -> None:
    # c1 killed at 110, c2 cut 119 .. 128: free from 116 to 119 (3 s, under the 4 s limit)
    # is no stall; with the cut from 125 the 9 s gap is one.
    ops = [waiting(100.0, 136.0, "c3.0")]
    ops += [grant("x", i, t) for i, t in enumerate((103.0, 106.0, 109.0, 135.0))]
    early = [Fault(FaultKind.KILL_CLIENT, "c1.0", 110.0, 110.0),
             Fault(FaultKind.CUT, "c2.0", 119.0, 128.0)]  # fmt: skip
    late = [early[0], Fault(FaultKind.CUT, "c2.0", 125.0, 128.0)]
    assert stall_spans(ops, early) == []
    assert stall_spans(ops, late) == ["116.000 .. 125.000"]


def test_another_clients_pause_does_not_excuse_a_slow_call() -> None:
    # c0's commit runs past its bound while c2 is paused (their faults overlap in time):
    # only the paused client's own calls are exempt.
    mine = ClientOp("c2.0", 0, OpKind.COMMIT, 10.0, 20.0, Outcome.LOST, 5.0)
    other = ClientOp("c0.0", 0, OpKind.COMMIT, 10.0, 20.0, Outcome.UNAVAILABLE, 5.0)
    faults = [
        Fault(FaultKind.PAUSE_CLIENT, "c2.0", 11.0, 14.0),
        Fault(FaultKind.CUT, "c0.0", 12.0, 13.0),
    ]
    result = check([], [mine, other], faults, PARAMS)
    assert [v.kind for v in result.violations] == [ViolationKind.UNBOUNDED_CALL]
    assert result.violations[0].detail.startswith("c0.0/")


def test_a_kill_overlapping_other_clients_faults_is_still_judged() -> None:
    # c1 is killed while c2 is cut and c3 paused: client faults of others do not excuse a
    # slow release (only a server fault does).
    faults = [
        Fault(FaultKind.CUT, "c2.0", 99.0, 103.0),
        Fault(FaultKind.KILL_CLIENT, "c1.0", 100.0, 100.0),
        Fault(FaultKind.PAUSE_CLIENT, "c3.0", 100.5, 103.5),
    ]
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(50, "a", owner="c1.0"),
        deleted(104, "a", 50, DeleteCause.SESSION_END),
    ]
    assert kinds(history, [], faults) == [ViolationKind.SLOW_RELEASE]
    server = Fault(FaultKind.KILL_LEADER, "m0", 101.0, 102.0)
    assert kinds(history, [], [*faults, server]) == []


# Elections the nemesis did not inject (chaos/leaders.py): the runner saw the cluster's
# term change between two polls. They excuse latency and liveness like a killed leader,
# never safety.


def election(start: float, end: float) -> LeaderChange:
    return LeaderChange(start, end, "m0", "m1", 4, 5)


def killed_c1_released_after_4_s() -> tuple[list[HistoryEvent], list[Fault]]:
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(50, "a", owner="c1.0"),
        deleted(104, "a", 50, DeleteCause.SESSION_END),  # 4 s > 2 + 1
    ]
    return history, [Fault(FaultKind.KILL_CLIENT, "c1.0", 100.0, 100.0)]


def test_a_slow_release_overlapping_a_spontaneous_election_is_not_judged() -> None:
    history, faults = killed_c1_released_after_4_s()
    result = check(history, [], faults, PARAMS, leader_changes=[election(101.2, 101.7)])
    assert result.violations == [] and result.release_latencies == []


def test_a_slow_release_with_no_election_in_its_window_is_still_flagged() -> None:
    history, faults = killed_c1_released_after_4_s()
    # one ended before the kill, one started after the bound (kill + 2 s + 1 s)
    changes = [election(97.0, 99.9), election(103.1, 103.4)]
    result = check(history, [], faults, PARAMS, leader_changes=changes)
    assert [v.kind for v in result.violations] == [ViolationKind.SLOW_RELEASE]


def test_a_stall_is_judged_only_after_an_election_and_its_recovery() -> None:
    ops = [waiting(100.0, 120.0), grant("x", 1, 101.0)]
    assert stall_spans(ops, []) == ["101.000 .. 120.000"]
    # election seen 103 .. 104: judged again from 104 + recovery (2 * 2 s + 2 s)
    spans = [
        v.detail.split("(")[1].split(")")[0]
        for v in check([], ops, [], PARAMS, leader_changes=[election(103.0, 104.0)]).violations
    ]
    assert spans == ["110.000 .. 120.000"]


def test_safety_violations_are_flagged_whatever_election_overlaps() -> None:
    everything = [election(0.0, 1000.0)]
    after_delete: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(2, "a"),
        deleted(3, "a", 2),
        write(4, "a", 2),
    ]
    leaked: list[HistoryEvent] = [CapacitySet(1, 1.0, 3), created(2, "a"), Marker(3, 3.0, END)]
    lost: list[HistoryEvent] = [CapacitySet(1, 1.0, 3), created(2, "a")]
    ack = ClientOp("c0.0", 0, OpKind.COMMIT, 2.5, 3.5, Outcome.OK, 5.0, "a", 2)
    for history, ops, expected in [
        (over_capacity_history(), [], ViolationKind.OVER_CAPACITY),
        (after_delete, [], ViolationKind.WRITE_AFTER_DELETE),
        (leaked, [], ViolationKind.LEAK),
        (lost, [ack], ViolationKind.LOST_WRITE),
    ]:
        result = check(history, ops, [], PARAMS, leader_changes=everything)
        assert [v.kind for v in result.violations] == [expected]
    result = check([], [], [], PARAMS, live_leases=["7"], leader_changes=everything)
    assert [v.kind for v in result.violations] == [ViolationKind.LEAK]


def granted(pos: int, key: str, token: int) -> EntryGranted:
    return EntryGranted(pos, float(pos), key, token)


def store_granting_history(*, over: bool = False, out_of_order: bool = False) -> list[HistoryEvent]:
    """A store that records its grants (PostgreSQL): capacity 3, a (w2) and b (w1) held,
    c (w1) then d (w1) waiting; a released, then c and d granted in token order."""
    history: list[HistoryEvent] = [
        CapacitySet(1, 1.0, 3),
        created(2, "a", 2),
        granted(2, "a", 2),
        created(3, "b", 1),
        granted(3, "b", 3),
        created(4, "c", 1),
        created(5, "d", 1),
    ]
    if not over:
        history.append(deleted(6, "a", 2))
    later = [granted(7, "d", 5), granted(7, "c", 4)] if out_of_order else [
        granted(7, "c", 4), granted(7, "d", 5)
    ]  # fmt: skip
    return [*history, *later, deleted(8, "b", 3), deleted(8, "c", 4), deleted(9, "d", 5)]


def test_the_stores_grants_in_order_and_within_capacity_pass() -> None:
    assert kinds(store_granting_history()) == []


def test_a_store_grant_past_the_capacity_is_flagged() -> None:
    assert ViolationKind.OVER_CAPACITY in kinds(store_granting_history(over=True))


def test_a_store_grant_past_a_lower_waiting_entry_is_flagged() -> None:
    assert kinds(store_granting_history(out_of_order=True)) == [ViolationKind.OVERTAKING]


def test_a_store_grant_of_an_unknown_entry_is_a_bad_history() -> None:
    history: list[HistoryEvent] = [CapacitySet(1, 1.0, 3), granted(2, "a", 2)]
    assert kinds(history) == [ViolationKind.BAD_HISTORY]
