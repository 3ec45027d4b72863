"""Short chaos runs (fixed seeds): the nemesis's faults against client processes, then
the store's history must show no violation. The suite has one run per mode and store
family within its time budget (ZooKeeper plain, etcd storm, Redis, PostgreSQL, MariaDB);
the other pairs are the soak's (`bash scripts/chaos`)."""

from __future__ import annotations

import itertools
import os

import pytest

from chaos.runner import RunConfig, run_once

SECONDS = float(os.environ.get("SEMAPHORE_RECIPES_CHAOS_SECONDS", "30"))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "seed"), [("zookeeper", "11")])
def test_short_chaos_run_finds_no_violation(backend: str, seed: str) -> None:
    report = run_once(RunConfig(backend=backend, seconds=SECONDS, seed=seed, clients=4))
    summary = report.summary()
    assert report.result.fenced_writes > 0 and report.acquisitions > 0, summary
    assert report.faults, summary
    assert summary["violations"] == {}, "\n".join(summary["details"])


@pytest.mark.slow
def test_short_redis_chaos_run_finds_no_violation() -> None:
    """One persistent Redis primary, 25 s (about 40 s in all): this seed's faults include
    a kill -9 of the server and its restart from the AOF, whose history spans both."""
    seconds = min(SECONDS, 25.0)
    report = run_once(RunConfig(backend="redis", seconds=seconds, seed="51", clients=4))
    summary = report.summary()
    assert report.result.fenced_writes > 0 and report.acquisitions > 0, summary
    assert report.faults, summary
    assert summary["violations"] == {}, "\n".join(summary["details"])


@pytest.mark.slow
def test_short_postgresql_chaos_run_finds_no_violation() -> None:
    """One PostgreSQL primary, 10 s (under 30 s in all): the history is the database's
    own (logical decoding), with the server's grants, which the checker checks too."""
    seconds = min(SECONDS, 10.0)
    report = run_once(RunConfig(backend="postgresql", seconds=seconds, seed="61", clients=3))
    summary = report.summary()
    assert report.result.fenced_writes > 0 and report.acquisitions > 0, summary
    assert report.faults, summary
    assert summary["violations"] == {}, "\n".join(summary["details"])


@pytest.mark.slow
def test_short_mysql_chaos_run_finds_no_violation() -> None:
    """One MariaDB server, 10 s (under 30 s in all): the history is its binary log, with
    the server's grants, which the checker checks too."""
    seconds = min(SECONDS, 10.0)
    report = run_once(RunConfig(backend="mysql", seconds=seconds, seed="71", clients=3))
    summary = report.summary()
    assert report.result.fenced_writes > 0 and report.acquisitions > 0, summary
    assert report.faults, summary
    assert summary["violations"] == {}, "\n".join(summary["details"])


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "seed"), [("etcd", "15")])
def test_short_storm_run_finds_no_violation(backend: str, seed: str) -> None:
    """The storm mode (chaos/storm.py): overlapping faults on 6 client slots."""
    report = run_once(RunConfig(backend=backend, seconds=SECONDS, seed=seed, clients=6, storm=True))
    summary = report.summary()
    assert report.result.fenced_writes > 0 and report.acquisitions > 0, summary
    assert any(
        a.target != b.target and a.start < b.end and b.start < a.end
        for a, b in itertools.combinations(report.faults, 2)
    ), "no two faults overlapped"
    assert summary["violations"] == {}, "\n".join(summary["details"])


@pytest.mark.slow
def test_a_short_run_with_over_admitting_clients_is_flagged() -> None:
    """End to end: clients whose admission is off by one must be caught from the store's
    history alone (so the short runs above can fail). Over-admission shows within the
    first seconds of contention: a short run shows it."""
    report = run_once(
        RunConfig(backend="zookeeper", seconds=5, seed="13", clients=3, mutation="over_admit")
    )
    assert report.result.by_kind()["over_capacity"] > 0, report.summary()
