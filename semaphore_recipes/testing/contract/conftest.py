"""Fixtures and store selection of the shipped contract suite (``--semaphore-store``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ... import registry
from ..services import (
    cluster,
    cluster_store,
    parametrize_stores,
    service,
    service_store,
    sync_service,
    sync_service_store,
)
from ..store_selection import fixture_prefix, selected_stores
from ..workers import workers

__all__ = [  # the fixtures, for pytest
    "cluster",
    "cluster_store",
    "service",
    "service_store",
    "sync_service",
    "sync_service_store",
    "workers",
]

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    selected_stores(config)  # a usage error once, before the suite is collected


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_stores(metafunc, selected_stores(metafunc.config))


def _stores_named(item: pytest.Item, schemes: set[str]) -> set[str]:
    """The stores a test names: in a parameter (``"redis"``, ``("etcd", Face.ASYNC)``) or
    in a fixture it asks for (``zookeeper_server``, ``memory_harness``)."""
    named = set()
    for fixture in getattr(item, "fixturenames", ()):
        owners = [s for s in schemes if fixture.startswith(fixture_prefix(s) + "_")]
        if owners:  # (the longest: redis_cluster_harness is redis+cluster's, not redis's)
            named.add(max(owners, key=len))
    callspec = getattr(item, "callspec", None)
    for value in callspec.params.values() if callspec is not None else ():
        first = value[0] if isinstance(value, tuple) and value else value
        if isinstance(first, str):
            named.add(first)
    return named & schemes


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the suite's tests that name a store not selected."""
    selected = set(selected_stores(config))
    schemes = set(registry.schemes())
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        mine = HERE in item.path.parents
        (dropped if mine and _stores_named(item, schemes) - selected else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
