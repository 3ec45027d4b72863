"""etcd-only tests use this backend alone (the contract suite covers both)."""

from __future__ import annotations

import pytest

from ..conftest import Service


@pytest.fixture
def ed(request: pytest.FixtureRequest) -> Service:
    from semaphore_recipes.testing.plugin import leftover_etcd_entries

    admin = request.getfixturevalue("etcd_admin")
    ns = request.getfixturevalue("sr_namespace")
    return Service(
        "etcd",
        request.getfixturevalue("etcd_url"),
        request.getfixturevalue("etcd_backend"),
        lambda: leftover_etcd_entries(admin, ns),
    )
