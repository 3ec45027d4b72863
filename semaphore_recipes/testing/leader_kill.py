"""``cycle_through_a_leader_kill``: worker processes cycling acquires while the leader of
a 3-member ensemble or cluster is killed (the scenario of the ``cluster`` tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .checker import read_checker
from .polling import wait_until
from .workers import Workers

__all__ = ["cycle_through_a_leader_kill"]


def cycle_through_a_leader_kill(
    url: str, workers: Workers, tmp_path: Path, kill_leader: Callable[[], None]
) -> None:
    """Four processes cycle weighted acquires (capacity 2) for 8 s; the leader is killed
    mid-way. Never above capacity, and work goes on under the new leader."""
    checker = tmp_path / "checker.json"
    checker.write_text("")
    args = ["ens", "2", "cycle", "--weights", "1,2", "--seconds", "8", "--checker", str(checker)]
    procs = [workers.start(url, *args) for _ in range(4)]
    # every worker connected first: one still connecting when the leader dies waits out
    # the election within its connect timeout, which a loaded CI machine overran
    for p in procs:
        Workers.expect(p, "OPENED", timeout=60)
    wait_until(lambda: read_checker(checker)["grants"] > 20)
    kill_leader()
    grants_at_kill = read_checker(checker)["grants"]
    for p in procs:
        Workers.expect(p, "CYCLES", timeout=60)
        assert p.wait(20) == 0
    state = read_checker(checker)
    assert state["max"] <= 2
    assert state["grants"] > grants_at_kill + 20  # work resumed under the new leader
