"""Two real Celery workers (a prefork pool and a thread pool, 4 slots each) on the test
Redis server as broker, running a task limited to 3 by ``LimitedTask``: never more than
3 running at once, every task completed, the ones not granted in time retried."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import group  # type: ignore[import-untyped]

from semaphore_recipes.testing.polling import wait_until

from . import celery_app
from .processes import spawn, stop

TASKS = 24


@pytest.fixture
def celery_setup(redis_server: Any, redis_url: str, redis_prefix: str) -> dict[str, str]:
    """The test app configured on the test server (broker and results in database 3,
    a queue of the test's own): the workers' environment for the same."""
    settings = (
        f"redis://{redis_server.host_port}/3",
        redis_url,
        f"{redis_prefix}-queue",
        f"{redis_prefix}:celery-runs",
    )
    celery_app.configure(*settings)
    return celery_app.environment(*settings)


@pytest.fixture
def celery_workers(
    celery_setup: dict[str, str], tmp_path: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two workers of the test app, 4 slots each: a prefork pool and a thread pool."""
    workers = [
        spawn(
            [
                *("celery", "-A", "tests.integrations.celery_app", "worker", "--pool", pool),
                *("--concurrency", "4", "-n", f"{pool}@%h", "--loglevel", "WARNING"),
                *("--without-gossip", "--without-mingle", "--without-heartbeat"),
            ],
            tmp_path / f"{pool}.log",
            celery_setup,
        )
        for pool in ("prefork", "threads")
    ]
    try:
        yield workers
    finally:
        stop(workers)


def most_at_once(runs: list[dict[str, Any]]) -> int:
    """The largest number of runs whose [start, end] intervals overlap at one moment."""
    edges = sorted([(r["start"], 1) for r in runs] + [(r["end"], -1) for r in runs])
    inside = most = 0
    for _, step in edges:  # (an end sorts before a start at the same instant)
        inside += step
        most = max(most, inside)
    return most


def test_most_at_once_counts_overlaps() -> None:
    runs = [{"start": 0, "end": 2}, {"start": 1, "end": 3}, {"start": 2, "end": 4}]
    assert most_at_once(runs) == 2
    assert most_at_once([*runs, {"start": 1.5, "end": 1.6}]) == 3


def test_two_workers_never_run_more_than_three(
    celery_workers: list[subprocess.Popen[bytes]],
    redis_backend: Callable[..., Any],
) -> None:
    started = time.monotonic()
    results = group(celery_app.limited.s(i) for i in range(TASKS)).apply_async()
    assert sorted(results.get(timeout=40)) == list(range(TASKS))  # all completed
    elapsed = time.monotonic() - started
    records = celery_app.app.backend.client.lrange(celery_app.app.conf.sr_test_records, 0, -1)
    runs = [json.loads(r) for r in records]
    retries = sum(r["retries"] for r in runs)
    workers = {r["worker"].split("@")[0] for r in runs}
    print(
        f"{len(runs)} runs in {elapsed:.1f} s, most at once {most_at_once(runs)}, "
        f"retries {retries}, workers {sorted(workers)}"
    )
    assert len(runs) == TASKS  # each ran once: a retried task ran only when granted
    assert most_at_once(runs) == 3  # the bound, and reached
    assert retries > 0  # the slots beyond 3 gave their task back rather than wait
    assert workers == {"prefork", "threads"}
    sem = redis_backend().semaphore("tests.integrations.celery_app.limited", 3)
    wait_until(lambda: not sem.status().holders and not sem.status().waiters, timeout=5)
