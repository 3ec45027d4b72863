"""ZooKeeper-only tests use this backend alone (the contract suite covers both)."""

from __future__ import annotations

import pytest

from ..conftest import Service


@pytest.fixture
def zk(request: pytest.FixtureRequest) -> Service:
    from semaphore_recipes.testing.plugin import leftover_entries

    admin = request.getfixturevalue("zookeeper_admin")
    ns = request.getfixturevalue("sr_namespace")
    return Service(
        "zookeeper",
        request.getfixturevalue("zookeeper_url"),
        request.getfixturevalue("zookeeper_backend"),
        lambda: leftover_entries(admin, ns),
    )
