"""Fixtures for the etcd layer tests: real etcd processes, never mocks.

A missing etcd binary is an error whose message names the install command
(``EtcdNotFound``), not a skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.testing.etcd_server import EtcdServer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One etcd member shared by the whole session (never paused or restarted)."""
    with EtcdServer(name="shared") as server:
        yield server


@pytest.fixture(scope="module")
def scratch_server() -> Iterator[EtcdServer]:
    """A member of the module's own, for tests that pause, stop or restart it."""
    with EtcdServer(name="scratch") as server:
        yield server


@pytest.fixture
def client(etcd_server: EtcdServer) -> Iterator[EtcdClient]:
    """A client of the shared member."""
    with EtcdClient([etcd_server.endpoint]) as c:
        yield c


@pytest.fixture
def ns() -> str:
    """A key prefix of the test's own."""
    return f"/sr-test/{uuid.uuid4().hex[:10]}/"
