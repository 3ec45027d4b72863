"""The ACL lines of docs/operations.md through Sentinel, set on every data node (ACL
users are per node, not replicated): the worker holds, the monitoring user reads the
status through the sentinels and is refused an acquire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import semaphore_recipes as sr

from ..secured import REDIS_MONITOR_COMMANDS, REDIS_WORKER_COMMANDS, redis_users_on_every_node


@pytest.fixture
def users(redis_sentinel_set: Any, redis_prefix: str) -> Iterator[dict[str, str]]:
    """URLs of a worker and a monitoring user made on every data node."""
    nodes = getattr(redis_sentinel_set, "nodes", None)
    if nodes is None:
        pytest.skip("an external Sentinel set: its nodes are not ours to add users to")
    rights = {"worker": REDIS_WORKER_COMMANDS, "monitor": REDIS_MONITOR_COMMANDS}
    sentinels, service = redis_sentinel_set.sentinel_hosts, redis_sentinel_set.service
    ports = [node.port for node in nodes]
    with redis_users_on_every_node(ports, redis_prefix, rights) as (names, password):
        yield {
            kind: f"redis+sentinel://{name}:{password}@{sentinels}/{service}/0"
            f"?prefix={redis_prefix}&session_timeout=4"
            for kind, name in names.items()
        }


def test_the_documented_users_through_the_sentinels(users: dict[str, str]) -> None:
    with sr.connect(users["worker"]) as worker, sr.connect(users["monitor"]) as monitor:
        held = worker.semaphore("pool", capacity=2).acquire(timeout=10)
        try:
            watched = monitor.semaphore("pool", create=False)
            st = watched.status()
            assert (st.capacity, st.used, [h.token for h in st.holders]) == (2, 1, [held.token])
            with pytest.raises(sr.PermissionDenied) as refused:
                watched.acquire(timeout=5)
            assert refused.value.user is not None and "monitor" in refused.value.user
            assert "semaphore 'pool'" in str(refused.value)
        finally:
            held.release()
        assert watched.status().used == 0
