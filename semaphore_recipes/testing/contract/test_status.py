"""``status()`` reads the store, never a cached view: once the capacity record is gone
(``delete_semaphore``, a store restarted without persistence) it raises
SemaphoreNotFound, on every backend and both faces."""

from __future__ import annotations

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness


def test_status_of_a_semaphore_deleted_meanwhile_raises_not_found(service: Harness) -> None:
    backend = service.connect()
    sem = backend.semaphore("st-gone", capacity=3)
    assert sem.status().capacity == 3
    service.connect().delete_semaphore("st-gone")
    with pytest.raises(sr.SemaphoreNotFound) as caught:
        sem.status()
    assert caught.value.name == "st-gone"
    with pytest.raises(sr.SemaphoreNotFound):
        backend.status("st-gone")
    backend.semaphore("st-gone", capacity=2)  # created again: read again
    assert sem.status().capacity == 2
