"""Shared test helpers. Server fixtures come from the semaphore_recipes pytest plugin; the
store fixtures (``service``, ``cluster``) and the helpers of the contract suite come
from the package (``semaphore_recipes.testing``), re-exported here for the tests of
this directory. ``service`` runs on the stores of ``--semaphore-store`` (pyproject.toml:
all four)."""

from __future__ import annotations

import pytest

from semaphore_recipes.testing.checker import read_checker
from semaphore_recipes.testing.interrupts import interrupt_acquires
from semaphore_recipes.testing.leader_kill import cycle_through_a_leader_kill
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.services import (
    cluster,
    cluster_store,
    needs,
    parametrize_stores,
    service,
    service_store,
)
from semaphore_recipes.testing.store_selection import selected_stores
from semaphore_recipes.testing.waiters import waiter_thread
from semaphore_recipes.testing.workers import Workers, workers

from .secured import _secured_etcd, _secured_redis, secured  # noqa: F401  (fixtures of the permission tests)

__all__ = [
    "Workers",
    "cluster",
    "cluster_store",
    "cycle_through_a_leader_kill",
    "interrupt_acquires",
    "needs",
    "read_checker",
    "service",
    "service_store",
    "wait_until",
    "waiter_thread",
    "workers",
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_stores(metafunc, selected_stores(metafunc.config))
