"""The leader watch (chaos/leaders.py): elections the nemesis did not inject are
recorded with a window that brackets them, logged in the run directory, and told apart
from the elections an injected kill or restart set off."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from chaos.__main__ import main
from chaos.cluster import make_cluster
from chaos.fleet import wait_until
from chaos.leaders import (
    LOG_NAME,
    LeaderView,
    LeaderWatch,
    MemberView,
    read_changes,
    settle,
    spontaneous,
)
from chaos.model import Fault, FaultKind, LeaderChange
from chaos.runner import load_run


def views(term: int, leader: str | None, *followers: tuple[str, int]) -> list[MemberView]:
    """The leader's own answer (if any) and followers' (member, term) answers."""
    out = [MemberView(leader, term, leader)] if leader is not None else []
    return out + [MemberView(m, t, leader if t == term else None) for m, t in followers]


def test_the_cluster_view_is_the_leader_of_the_highest_term() -> None:
    assert settle([]) is None
    assert settle(views(3, "m0", ("m1", 3), ("m2", 2))) == LeaderView(3, "m0")
    # m1 campaigns in term 4 and nobody leads there yet: an election is running
    assert settle([*views(3, "m0", ("m2", 3)), MemberView("m1", 4, None)]) is None
    # members that disagree on the leader of a term settle nothing
    assert settle([MemberView("m0", 3, "m0"), MemberView("m1", 3, "m1")]) is None


def test_a_term_change_is_recorded_with_a_window_that_brackets_it(tmp_path: Path) -> None:
    watch = LeaderWatch(lambda: [], tmp_path / LOG_NAME)
    assert watch.observe(views(3, "m0", ("m1", 3)), 10.0, 10.1) is None  # the baseline
    assert watch.current == LeaderView(3, "m0")
    assert watch.observe(views(3, "m0", ("m1", 3)), 10.5, 10.6) is None
    # then: nobody answers, an election runs, the old leader alone answers (stale)
    assert watch.observe([], 11.0, 11.5) is None
    assert watch.observe([MemberView("m1", 4, None)], 12.0, 12.1) is None
    assert watch.observe([MemberView("m0", 3, "m0")], 12.5, 12.6) is None
    change = watch.observe(views(4, "m1", ("m0", 3), ("m2", 4)), 13.0, 13.2)
    # from the start of the last poll that saw term 3 settled (with the leader's own
    # answer in it: 12.5) to the end of the first that saw term 4 settled
    assert change == LeaderChange(12.5, 13.2, "m0", "m1", 3, 4)
    # the new term is the baseline now; re-election of the same leader is a change too
    assert watch.observe(views(4, "m1", ("m2", 4)), 14.0, 14.1) is None
    assert watch.observe(views(5, "m1", ("m2", 5)), 15.0, 15.1) == LeaderChange(
        14.0, 15.1, "m1", "m1", 4, 5
    )
    assert watch.changes == [change, LeaderChange(14.0, 15.1, "m1", "m1", 4, 5)]
    assert read_changes(tmp_path) == watch.changes
    kinds = {json.loads(line)["kind"] for line in (tmp_path / LOG_NAME).read_text().splitlines()}
    assert kinds == {"leader_change"}


def test_a_member_restarting_is_no_election(tmp_path: Path) -> None:
    watch = LeaderWatch(lambda: [], tmp_path / LOG_NAME)
    watch.observe(views(3, "m0", ("m1", 3), ("m2", 3)), 1.0, 1.1)
    watch.observe(views(3, "m0", ("m1", 3)), 2.0, 2.1)  # m2 killed
    watch.observe([*views(3, "m0", ("m1", 3)), MemberView("m2", 2, None)], 3.0, 3.1)
    watch.observe(views(3, "m0", ("m1", 3), ("m2", 3)), 4.0, 4.1)  # m2 caught up
    assert watch.changes == [] and not (tmp_path / LOG_NAME).exists()


def test_elections_inside_an_injected_server_fault_are_not_spontaneous() -> None:
    changes = [
        LeaderChange(10.0, 10.5, "m0", "m1", 3, 4),  # during a leader kill 10.2 .. 12
        LeaderChange(12.5, 12.8, "m1", "m2", 4, 5),  # within 1 s of its heal
        LeaderChange(20.0, 20.4, "m2", "m0", 5, 6),  # during client faults only
        LeaderChange(30.0, 30.4, "m0", "m1", 6, 7),  # nothing injected near it
    ]
    faults = [
        Fault(FaultKind.KILL_LEADER, "m0", 10.2, 12.0),
        Fault(FaultKind.KILL_CLIENT, "c1.3", 19.0, 19.0),
        Fault(FaultKind.CUT, "c2.0", 19.5, 21.0),
    ]
    assert spontaneous(changes, faults) == changes[2:]
    # the checker's own fault (an election seen) does not explain another election
    assert spontaneous(changes, [c.as_fault() for c in changes]) == changes


def test_runs_kept_before_the_watch_existed_recheck_with_no_election(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An old run directory (no leaders.jsonl) loads with no leader change and
    ``--recheck`` still judges it: here a slow release, which nothing excuses."""
    lines = {
        "history.jsonl": [
            {"type": "CapacitySet", "pos": 1, "time": 1.0, "capacity": 3},
            {"type": "EntryCreated", "pos": 50, "time": 50.0, "key": "a", "token": 50,
             "weight": 1, "owner": "c1.0", "session": 7},
            {"type": "EntryDeleted", "pos": 104, "time": 104.0, "key": "a", "token": 50,
             "cause": "session_end"},
        ],
        "nemesis.jsonl": [{"kind": "kill_client", "target": "c1.0", "start": 100.0, "end": 100.0}],
        "ops-admin.jsonl": [],
    }  # fmt: skip
    for name, docs in lines.items():
        (tmp_path / name).write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert load_run(tmp_path).leader_changes == []
    assert main(["--recheck", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "slow_release: entries of c1.0 killed at 100.000" in out
    assert "leader changes seen: 0, spontaneous (no injected fault): 0" in out
    # the same run with an election seen during the release: nothing to report
    change = LeaderChange(100.5, 101.5, "m0", "m1", 3, 4)
    watch = LeaderWatch(lambda: [], tmp_path / LOG_NAME)
    watch.observe(views(3, "m0"), 100.5, 100.6)
    assert watch.observe(views(4, "m1"), 101.4, 101.5) == change
    assert main(["--recheck", str(tmp_path)]) == 0
    assert "leader changes seen: 1, spontaneous (no injected fault): 1" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["zookeeper", "etcd"])
def test_the_watch_sees_an_election_forced_outside_the_nemesis(
    backend: str, tmp_path: Path
) -> None:
    """Real 3-member cluster: the test (not a nemesis) kills the leader; the watch
    records the election, with a window that ends after the kill, in the run's log."""
    cluster = make_cluster(backend, tmp_path, 2.0)
    watch = LeaderWatch(cluster.member_views, tmp_path / LOG_NAME)
    try:
        cluster.start()
        watch.start()
        assert wait_until(lambda: watch.current is not None, 20.0), "no settled leader"
        assert watch.current is not None
        old, term = cluster.leader(), watch.current.term
        assert watch.current.leader == old
        killed_at = time.time()
        cluster.kill(old)
        assert wait_until(lambda: bool(watch.changes), 30.0), "no election seen"
        cluster.revive(old)
        (change,) = watch.changes
        assert (change.old_leader, change.old_term) == (old, term)
        assert change.new_leader != old and change.new_term > term
        assert change.start < change.end and change.end >= killed_at
        assert read_changes(tmp_path) == [change]
        # nothing injected: spontaneous; a kill logged by a nemesis would explain it
        assert spontaneous([change], []) == [change]
        kill = Fault(FaultKind.KILL_LEADER, old, killed_at, time.time())
        assert spontaneous([change], [kill]) == []
    finally:
        watch.stop()
        cluster.close()
    assert watch.error is None
