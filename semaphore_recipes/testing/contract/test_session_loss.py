"""Several threads of one backend waiting when its session ends; a released permit's
fence once its entry's key serves a newer permit."""

from __future__ import annotations

import threading
import uuid

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness, Verb
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.services import needs

WEIGHTS = (1, 2, 1, 2, 1, 2, 1, 2)  # eight threads of one backend, capacity 2
CAPACITY = 2


def test_threads_of_one_backend_waiting_across_a_session_loss_drain_the_queue(
    service: Harness,
) -> None:
    """Every thread waiting on one backend when its session ends enters the queue again
    on the new session, and each gets its permit in turn once the holder leaves; never
    above capacity; nothing is left in the store (no entry, no lease) but the live
    sessions' own."""
    needs(service, Verb.EXPIRE_SESSION)
    lists_sessions = service.supports(Verb.LIST_SESSIONS)
    sessions_before = service.sessions() if lists_sessions else set()
    holder_backend = service.connect()
    holder_sem = holder_backend.semaphore("drain", capacity=CAPACITY)
    waiters_backend = service.connect()
    sem = waiters_backend.semaphore("drain", capacity=CAPACITY)
    held = holder_sem.acquire(permits=CAPACITY)

    lock = threading.Lock()
    inside = [0, 0]  # weight held by the threads now, and the most ever
    granted: list[int] = []
    failures: list[BaseException] = []

    def work(index: int, weight: int) -> None:
        try:
            with sem.acquire(permits=weight, timeout=60) as permit:
                with lock:
                    inside[0] += weight
                    inside[1] = max(inside[1], inside[0])
                    granted.append(index)
                assert permit.state is sr.PermitState.HELD
                with lock:
                    inside[0] -= weight
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=work, args=(i, w), daemon=True) for i, w in enumerate(WEIGHTS)
    ]
    for t in threads:
        t.start()
    wait_until(lambda: len(holder_sem.status().waiters) == len(WEIGHTS), timeout=20)
    before = {w.token for w in holder_sem.status().waiters}

    service.expire_session(waiters_backend)

    def all_queued_again() -> bool:
        waiters = holder_sem.status().waiters
        return len(waiters) >= len(WEIGHTS) and not before & {w.token for w in waiters}

    wait_until(all_queued_again, timeout=20)
    assert len(holder_sem.status().waiters) == len(WEIGHTS), "an entry too many in the queue"
    held.release()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert sorted(granted) == list(range(len(WEIGHTS))), "the queue did not drain"
    assert inside[1] <= CAPACITY
    # nothing left before any backend closes (closing would revoke what leaked)
    assert service.entries() == []
    if lists_sessions:  # etcd: a lease made for an attempt that was given up must go
        alive = service.sessions() - sessions_before
        mine = {service.session_of(holder_backend), service.session_of(waiters_backend)}
        assert alive == mine, "a stray session"
    # and a newcomer is served
    service.connect().semaphore("drain", capacity=CAPACITY).acquire(timeout=10).release()


def test_a_released_permits_transaction_fails_once_its_key_serves_a_newer_permit(
    service: Harness,
) -> None:
    """etcd reuses a released entry's key for the backend's next entry; the old permit's
    fence must still fail (as ZooKeeper's does, whose entry names are never reused)."""
    backend = service.connect()
    sem = backend.semaphore("fence-reuse", capacity=1)
    old = sem.acquire()
    old.release()
    new = sem.acquire()
    if service.kind == "etcd":
        assert new.key == old.key  # the case at hand: same key, a newer entry
    target = backend.data_key("fence-reuse", uuid.uuid4().hex)
    stale = old.transaction()
    stale.create(target, b"old")
    with pytest.raises(sr.PermitLost):
        stale.commit()
    fresh = new.transaction()
    fresh.create(target, b"new")
    fresh.commit()
    new.release()


def test_closing_a_backend_loses_its_permits_and_ends_its_waiting_acquires(
    service: Harness,
) -> None:
    """``close()`` ends the session, and with it the entries: a permit held on it says so
    (LOST, ``lost`` set, ``check()`` raises) instead of staying HELD, and an acquire waiting
    on another thread ends with BackendUnavailable instead of waiting out its timeout."""
    other = service.connect()
    watcher = other.semaphore("closing", capacity=2)
    blocker = watcher.acquire()
    backend = service.connect()
    sem = backend.semaphore("closing", capacity=2)
    held = sem.acquire()
    outcome: list[BaseException | object] = []

    def wait() -> None:
        try:
            outcome.append(sem.acquire(timeout=60))
        except BaseException as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=wait, daemon=True)
    waiting.start()
    wait_until(lambda: len(watcher.status().waiters) == 1, timeout=20)
    backend.close()
    waiting.join(30)
    assert not waiting.is_alive(), "the waiting acquire outlived close()"
    assert len(outcome) == 1 and isinstance(outcome[0], sr.BackendUnavailable), outcome
    assert held.state is sr.PermitState.LOST
    assert held.lost.is_set()
    with pytest.raises(sr.PermitLost):
        held.check()
    held.release()  # still idempotent, and quiet
    assert held.state is sr.PermitState.LOST
    blocker.release()
    wait_until(lambda: service.entries() == [], timeout=20)
