"""The ACL lines of docs/operations.md through Sentinel, set on every data node (ACL
users are per node, not replicated): the worker holds, the monitoring user reads the
status through the sentinels and is refused an acquire."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import semaphore_recipes as sr

from ..secured import REDIS_MONITOR_COMMANDS, REDIS_WORKER_COMMANDS


@pytest.fixture
def users(redis_sentinel_set: Any, redis_prefix: str) -> Iterator[dict[str, str]]:
    """URLs of a worker and a monitoring user made on every data node."""
    import redis

    nodes = getattr(redis_sentinel_set, "nodes", None)
    if nodes is None:
        pytest.skip("an external Sentinel set: its nodes are not ours to add users to")
    suffix, password = uuid.uuid4().hex[:6], uuid.uuid4().hex
    lines = {f"worker-{suffix}": REDIS_WORKER_COMMANDS, f"monitor-{suffix}": REDIS_MONITOR_COMMANDS}
    admins: list[Any] = [redis.Redis(host="127.0.0.1", port=node.port) for node in nodes]
    for admin in admins:
        for name, commands in lines.items():
            admin.execute_command(
                "ACL", "SETUSER", name, "on", f">{password}", f"~{redis_prefix}:*",
                "resetchannels", "-@all", *commands.split(),
            )  # fmt: skip
    sentinels, service = redis_sentinel_set.sentinel_hosts, redis_sentinel_set.service
    try:
        yield {
            name.split("-")[0]: (
                f"redis+sentinel://{name}:{password}@{sentinels}/{service}/0"
                f"?prefix={redis_prefix}&session_timeout=4"
            )
            for name in lines
        }
    finally:
        for admin in admins:
            admin.execute_command("ACL", "DELUSER", *lines)
            admin.close()


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
