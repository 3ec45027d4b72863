"""etcd-only tests use this backend alone (the contract suite covers both)."""

from __future__ import annotations

import pytest

from semaphore_recipes.testing.etcd_harness import EtcdHarness


@pytest.fixture
def ed(etcd_harness: EtcdHarness) -> EtcdHarness:
    return etcd_harness
