"""``run`` while it waits: its place in the queue on stderr, moving as the queue moves
(one line per change when stderr is not a terminal), and nothing with ``--quiet``."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from semaphore_recipes.testing.harness import Harness

from .conftest import Spawned, Spawner, Store, wait_for

REDIS_ONLY = pytest.mark.parametrize("service", ["redis"], indirect=True)
LINE = re.compile(
    r"waiting for 'pos': (?:next in line|\d+ waiting ahead \(\d+ permits?\)), "
    r"(\d+) holders? \((\d+)/3 permits\), (\d+) s$"
)


def _holders_shown(spawned: Spawned) -> list[int]:
    return [
        int(m.group(1))
        for line in spawned.stderr().splitlines()
        if (m := LINE.fullmatch(line)) is not None
    ]


@REDIS_ONLY
def test_run_behind_three_holders_shows_its_position_as_they_release(
    store: Store, service: Harness, spawn: Spawner, tmp_path: Path
) -> None:
    backend = service.connect()
    sem = backend.semaphore("pos", capacity=3)
    holders = [sem.acquire() for _ in range(3)]
    done = tmp_path / "done"
    run = spawn("run", "pos", "-c", "3", "-p", "3", "--url", store.url, "--", "touch", str(done))
    wait_for(lambda: _holders_shown(run) == [3], 30, "the first position line")
    for left in (2, 1):
        holders.pop().release()
        shown = f"{left} holder(s) shown"
        wait_for(lambda left=left: _holders_shown(run)[-1:] == [left], 15, shown)
    assert not done.exists()
    holders.pop().release()
    assert run.wait(30) == 0, run.stderr()
    assert done.exists()
    # one line per change, not one per read: the reads come every second
    assert _holders_shown(run) == [3, 2, 1], run.stderr()


@REDIS_ONLY
def test_run_quiet_shows_nothing_while_waiting(
    store: Store, service: Harness, spawn: Spawner
) -> None:
    sem = service.connect().semaphore("quiet", capacity=1)
    holder = sem.acquire()
    run = spawn("run", "quiet", "-c", "1", "-q", "--url", store.url, "--", "true")
    wait_for(lambda: len(sem.status().waiters) == 1, 30, "the run to wait")
    time.sleep(1.5)  # more than a read's interval
    holder.release()
    assert run.wait(30) == 0, run.stderr()
    assert run.stderr() == ""
