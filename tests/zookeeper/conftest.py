"""ZooKeeper-only tests use this backend alone (the contract suite covers both)."""

from __future__ import annotations

import pytest

from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness


@pytest.fixture
def zk(zookeeper_harness: ZooKeeperHarness) -> ZooKeeperHarness:
    return zookeeper_harness
