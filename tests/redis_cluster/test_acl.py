"""The ACL lines of docs/operations.md on Redis Cluster, set on every node: the worker's
acquires, waits, is woken and writes fenced; the monitoring user reads the status and
is refused an acquire."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import semaphore_recipes as sr

from ..secured import (
    REDIS_CLUSTER_COMMANDS,
    REDIS_CLUSTER_WORKER_COMMANDS,
    REDIS_MONITOR_COMMANDS,
    REDIS_WORKER_COMMANDS,
    redis_users_on_every_node,
)


@pytest.fixture
def users(redis_cluster: Any, redis_prefix: str) -> Iterator[dict[str, str]]:
    """URLs of a worker and a monitoring user made on every node (ACLs are per node)."""
    rights = {
        "worker": f"&{redis_prefix}:* {REDIS_WORKER_COMMANDS} {REDIS_CLUSTER_WORKER_COMMANDS}"
        f" {REDIS_CLUSTER_COMMANDS}",
        "monitor": f"{REDIS_MONITOR_COMMANDS} {REDIS_CLUSTER_COMMANDS}",
    }
    ports = [node.port for node in redis_cluster.nodes]
    nodes = ",".join(redis_cluster.startup_nodes[: redis_cluster.primaries])
    with redis_users_on_every_node(ports, redis_prefix, rights) as (names, password):
        yield {
            kind: f"redis+cluster://{name}:{password}@{nodes}?prefix={redis_prefix}"
            for kind, name in names.items()
        }


def test_the_documented_users_on_every_node(users: dict[str, str]) -> None:
    with sr.connect(users["worker"]) as worker, sr.connect(users["monitor"]) as monitor:
        sem = worker.semaphore("{acl}pool", capacity=1)
        held = sem.acquire(timeout=10)
        woken: list[sr.Permit] = []
        waiter = threading.Thread(target=lambda: woken.append(sem.acquire(timeout=20)))
        waiter.start()
        watched = monitor.semaphore("{acl}pool", create=False)
        try:
            st = watched.status()
            for _ in range(50):
                if st.waiters:
                    break
                st = watched.status()
            assert [h.token for h in st.holders] == [held.token] and len(st.waiters) == 1
            with pytest.raises(sr.PermissionDenied) as refused:
                watched.acquire(timeout=5)
            assert "semaphore '{acl}pool'" in str(refused.value)
        finally:
            held.release()
            waiter.join(30)
        assert woken, "the waiter was not woken"
        with woken[0] as permit:
            tx = permit.transaction()
            tx.create(worker.data_key("{acl}pool", "row"), b"1")
            tx.commit()
        assert watched.status().used == 0
