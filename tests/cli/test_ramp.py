"""``set-capacity --ramp/--resume/--cancel`` against real servers: a ramp whose process
is killed leaves its plan in ``status`` and ``--resume`` finishes it; a plain
``set-capacity`` cancels a running ramp (exit 80); bad input exits 64 before any I/O.
(The contract suite checks the ramps themselves on every store and both faces.)"""

from __future__ import annotations

import json
import signal
import time

import pytest

from .conftest import Spawner, Store, assert_one_line_error, cli, wait_for

# (one store each: the command line runs the same library calls on every store)
REDIS = pytest.mark.parametrize("service", ["redis"], indirect=True)
ETCD = pytest.mark.parametrize("service", ["etcd"], indirect=True)


def _status(store: Store, name: str) -> dict[str, object]:
    shown = cli("status", name, "--json", "--url", store.url)
    assert shown.returncode == 0, shown.stderr
    doc: dict[str, object] = json.loads(shown.stdout)
    return doc


@REDIS
def test_a_killed_ramp_leaves_its_plan_in_status_and_resume_finishes_it(
    store: Store, spawn: Spawner
) -> None:
    sem = store.service.connect().semaphore("rc", 1)
    ramping = spawn("set-capacity", "rc", "4", "--ramp", "1/300ms", "--url", store.url)
    wait_for(lambda: sem.status().capacity == 2, 20, "the first step")
    ramping.proc.send_signal(signal.SIGKILL)
    ramping.wait(10)
    assert "rc: capacity 2 (version " in ramping.stdout()
    time.sleep(0.7)  # overdue by more than an interval
    doc = _status(store, "rc")
    plan = doc["ramp"]
    assert doc["capacity"] == 2 and isinstance(plan, dict), doc
    assert (plan["target"], plan["step"], plan["interval"]) == (4, 1, 0.3)
    assert plan["stalled"] is True
    table = cli("status", "rc", "--url", store.url).stdout
    assert "ramp: to 4 by 1 every 0.3s" in table and "STALLED" in table, table
    assert "set-capacity rc --resume" in table
    resumed = cli("set-capacity", "rc", "--resume", "--url", store.url)
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stdout.splitlines()
    assert [line.split(" (")[0] for line in lines[:2]] == ["rc: capacity 3", "rc: capacity 4"]
    assert lines[-1] == "rc: capacity 4, ramp done"
    doc = _status(store, "rc")
    assert doc["capacity"] == 4 and doc["ramp"] is None
    nothing = cli("set-capacity", "rc", "--resume", "--url", store.url)
    assert nothing.returncode == 0 and nothing.stdout.strip() == "rc: no ramp to resume"


@ETCD
def test_a_plain_set_capacity_cancels_a_running_ramp(store: Store, spawn: Spawner) -> None:
    sem = store.service.connect().semaphore("rc-cancel", 1)
    ramping = spawn("set-capacity", "rc-cancel", "9", "--ramp", "1/0.3", "--url", store.url)
    wait_for(lambda: sem.status().ramp is not None, 20, "the ramp to start")
    plain = cli("set-capacity", "rc-cancel", "3", "--url", store.url)
    assert plain.returncode == 0, plain.stderr
    assert ramping.wait(20) == 80, ramping.stderr()  # it stopped at its next step
    assert "cancelled or replaced" in ramping.stderr()
    status = sem.status()
    assert status.capacity == 3 and status.ramp is None
    dropped = cli("set-capacity", "rc-cancel", "--cancel", "--url", store.url)
    assert dropped.returncode == 0 and dropped.stdout.strip() == "rc-cancel: no ramp under way"


@pytest.mark.parametrize(
    "args",
    [
        ("rc-bad", "3", "--ramp", "0/1s"),
        ("rc-bad", "3", "--ramp", "two/1s"),
        ("rc-bad", "3", "--resume"),
        ("rc-bad", "--ramp", "1/1s"),
    ],
)
def test_bad_ramp_arguments_exit_64_before_any_io(args: tuple[str, ...]) -> None:
    # (a URL nothing listens on: an attempt to connect would exit 69, not 64)
    refused = cli("set-capacity", *args, "--url", "etcd://127.0.0.1:9/")
    assert refused.returncode == 64, refused.stderr
    assert_one_line_error(refused)


def test_status_table_json_and_metrics_show_a_ramp() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from semaphore_recipes import RampPlan, Status
    from semaphore_recipes.cli._common import status_json, status_table
    from semaphore_recipes.prometheus import StatusCollector

    plan = RampPlan(8, 2, 30.0, next_at=100.0, by="ops:1", since=40.0)
    states = {"a": Status("a", 4, (), (), ramp=plan), "b": Status("b", 2, (), ())}
    running = status_table(states["a"], 90.0)[1]
    assert running == "ramp: to 8 by 2 every 30s (started by ops:1, 50.0s ago); next step in 10.0s"
    assert "STALLED" in status_table(states["a"], 131.0)[1]  # overdue by more than 30 s
    assert "STALLED" not in status_table(states["a"], 129.0)[1]
    assert len(status_table(states["b"], 0.0)) == 1
    doc = status_json(states["a"], 90.0)["ramp"]
    assert doc == {
        "target": 8,
        "step": 2,
        "interval": 30.0,
        "next_step_at": 100.0,
        "next_step_in": 10.0,
        "stalled": False,
        "by": "ops:1",
        "since": 40.0,
    }
    assert status_json(states["b"], 0.0)["ramp"] is None
    registry = CollectorRegistry()
    registry.register(StatusCollector(states.__getitem__, ["a", "b"], min_interval=0))
    text = generate_latest(registry).decode()
    assert 'semaphore_recipes_target_capacity{semaphore="a"} 8.0' in text
    assert 'semaphore_recipes_target_capacity{semaphore="b"} 2.0' in text
