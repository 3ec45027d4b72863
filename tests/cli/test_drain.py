"""``drain``, ``resume`` and what ``run`` and ``status`` do with a draining semaphore,
against real servers."""

from __future__ import annotations

import json
import threading
import time

import pytest

from semaphore_recipes.backend import Capability
from semaphore_recipes.registry import backend_class

from .conftest import Spawner, Store, assert_one_line_error, cli, wait_for

# the command line runs the sync face (the contract suite checks both faces)
EVERY_STORE = pytest.mark.parametrize(
    "service", ["zookeeper", "etcd", "redis", "postgresql", "mysql"], indirect=True
)
ETCD_ONLY = pytest.mark.parametrize("service", ["etcd"], indirect=True)


@EVERY_STORE
def test_drain_refuses_run_tells_the_waiter_and_waits_for_the_holder(
    store: Store, spawn: Spawner
) -> None:
    if not backend_class(store.kind).capabilities.has(Capability.DRAIN):
        pytest.skip(f"the {store.kind} backend keeps no drain flag")
    sem = store.service.connect().semaphore("dr", 1)
    holder = sem.acquire()
    waiting = spawn("run", "dr", "-c", "1", "--url", store.url, "--", "true")
    wait_for(lambda: len(sem.status().waiters) == 1, 20, "the run to queue")
    drained = cli("drain", "dr", "--url", store.url)
    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.strip() == "dr: draining (1 holder(s) left)"
    assert waiting.wait(20) == 79, waiting.stderr()  # the waiter was told
    assert "is draining" in waiting.stderr()
    started = time.monotonic()
    refused = cli("run", "dr", "-c", "1", "--url", store.url, "--", "true")
    assert refused.returncode == 79 and time.monotonic() - started < 10
    assert_one_line_error(refused)
    assert "semaphore-recipes resume dr" in refused.stderr
    doc = json.loads(cli("status", "dr", "--json", "--url", store.url).stdout)
    assert doc["draining"] is True and doc["waiters"] == [] and len(doc["holders"]) == 1
    late = cli("drain", "dr", "--wait", "--timeout", "0.2", "--url", store.url)
    assert late.returncode == 75, late.stderr
    assert_one_line_error(late)
    threading.Timer(0.5, holder.release).start()
    done = cli("drain", "dr", "--wait", "--timeout", "30", "--url", store.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "dr: draining, no holder left"
    resumed = cli("resume", "dr", "--url", store.url)
    assert resumed.returncode == 0 and resumed.stdout.strip() == "dr: resumed", resumed.stderr
    assert not sem.status().draining
    sem.acquire(timeout=10).release()


@ETCD_ONLY
def test_drain_of_a_missing_semaphore_exits_66_and_timeout_needs_wait(store: Store) -> None:
    missing = cli("drain", "nope", "--url", store.url)
    assert missing.returncode == 66, missing.stderr
    assert not store.stored("nope")
    usage = cli("drain", "nope", "--timeout", "1", "--url", store.url)
    assert usage.returncode == 64
    assert_one_line_error(usage)


def test_status_table_json_and_metrics_show_the_draining_state() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from semaphore_recipes import Status
    from semaphore_recipes.cli._common import status_json, status_table
    from semaphore_recipes.prometheus import StatusCollector

    states = {"a": Status("a", 2, (), (), draining=True), "b": Status("b", 2, (), ())}
    assert "DRAINING" in status_table(states["a"], 0.0)[0]
    assert "DRAINING" not in status_table(states["b"], 0.0)[0]
    assert status_json(states["a"], 0.0)["draining"] is True
    assert status_json(states["b"], 0.0)["draining"] is False
    registry = CollectorRegistry()
    registry.register(StatusCollector(states.__getitem__, ["a", "b"], min_interval=0))
    text = generate_latest(registry).decode()
    assert 'semaphore_recipes_draining{semaphore="a"} 1.0' in text
    assert 'semaphore_recipes_draining{semaphore="b"} 0.0' in text
