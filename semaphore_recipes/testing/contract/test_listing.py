"""``backend.list()``: the semaphores of the backend's namespace with their capacity,
sorted by name, on every backend and both faces (Redis Cluster: NotSupported)."""

from __future__ import annotations

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness


def test_list_shows_each_semaphore_with_its_capacity_as_they_come_and_go(
    service: Harness,
) -> None:
    backend = service.connect()
    if service.kind == "redis+cluster":  # a SCAN per primary: not written (docs/cli.md)
        with pytest.raises(sr.NotSupported):
            backend.list()
        return
    assert backend.list() == ()
    backend.semaphore("ls-b", capacity=5)
    sem = backend.semaphore("ls-a", capacity=2)
    with sem.acquire(), backend.semaphore("ls-c", capacity=1).acquire():
        # a data key and held entries are not semaphores
        with sem.acquire() as permit:
            txn = permit.transaction()
            txn.create(backend.data_key("ls-a", "cfg"), b"x")
            txn.commit()
        sem.set_capacity(3)
        assert backend.list() == (
            sr.StoredSemaphore("ls-a", 3),
            sr.StoredSemaphore("ls-b", 5),
            sr.StoredSemaphore("ls-c", 1),
        )
    service.connect().delete_semaphore("ls-b")
    assert [s.name for s in service.connect().list()] == ["ls-a", "ls-c"]
