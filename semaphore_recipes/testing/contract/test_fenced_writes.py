"""The fenced transaction's one method set, the same on every backend: create / set /
delete, all or none, PermitLost when the fence fails, WriteConflict when a write's
condition does; ``read``, ``data_key`` and ``delete_semaphore`` beside it."""

from __future__ import annotations

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness


def _fresh(service: Harness, name: str) -> tuple[sr.Client, sr.Semaphore, str]:
    backend = service.connect()
    sem = backend.semaphore(name, capacity=1)
    return backend, sem, backend.data_key(name, "value")


def test_create_set_delete_round_trip(service: Harness) -> None:
    backend, sem, key = _fresh(service, "fw-round")
    with sem.acquire(timeout=10) as permit:
        assert backend.read(key) is None
        permit.transaction().create(key, b"one").commit()
        assert backend.read(key) == b"one"
        permit.transaction().set(key, b"two").commit()
        assert backend.read(key) == b"two"
        permit.transaction().delete(key).commit()
        assert backend.read(key) is None


@pytest.mark.parametrize("kind", ["create-existing", "set-missing", "delete-missing"])
def test_a_failed_condition_writes_nothing(service: Harness, kind: str) -> None:
    backend, sem, key = _fresh(service, "fw-cond")
    other = backend.data_key("fw-cond", "other")
    with sem.acquire(timeout=10) as permit:
        if kind == "create-existing":
            permit.transaction().create(key, b"old").commit()
        tx = permit.transaction().create(other, b"side effect")
        if kind == "create-existing":
            tx.create(key, b"new")
        elif kind == "set-missing":
            tx.set(key, b"new")
        else:
            tx.delete(key)
        with pytest.raises(sr.WriteConflict) as err:
            tx.commit()
        assert err.value.key == key
        assert backend.read(other) is None  # all or none
        assert backend.read(key) == (b"old" if kind == "create-existing" else None)
        assert permit.state is sr.PermitState.HELD  # a conflict is not a lost permit


def test_the_fence_fails_after_release_before_any_condition(service: Harness) -> None:
    backend, sem, key = _fresh(service, "fw-fence")
    permit = sem.acquire(timeout=10)
    permit.transaction().create(key, b"v").commit()
    permit.release()
    with pytest.raises(sr.PermitLost):
        permit.transaction().set(key, b"late").commit()
    with pytest.raises(sr.PermitLost):  # a failing condition too: the fence comes first
        permit.transaction().create(key, b"late").commit()
    assert backend.read(key) == b"v"


def test_bad_writes_are_refused_before_any_io(service: Harness) -> None:
    _, sem, _ = _fresh(service, "fw-bad")
    with sem.acquire(timeout=10) as permit:
        tx = permit.transaction()
        with pytest.raises(TypeError):
            tx.set("", b"x")
        with pytest.raises(TypeError):
            tx.create("/k", "not bytes")  # type: ignore[arg-type]
        tx.create("/k", b"x")
        with pytest.raises(ValueError, match="twice"):
            tx.set("/k", b"y")
        assert [w.key for w in tx.writes] == ["/k"]


def test_delete_semaphore_removes_capacity_entries_and_data(service: Harness) -> None:
    backend, sem, key = _fresh(service, "fw-drop")
    with sem.acquire(timeout=10) as permit:
        permit.transaction().create(key, b"v").commit()
    backend.delete_semaphore("fw-drop")
    assert backend.read(key) is None
    with pytest.raises(sr.SemaphoreNotFound):
        backend.semaphore("fw-drop", create=False)
    backend.delete_semaphore("fw-drop")  # nothing there: no error
    with pytest.raises(sr.InvalidName):
        backend.data_key("no/slash")
