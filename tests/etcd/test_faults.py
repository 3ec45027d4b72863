"""etcd-specific faults: repeated lease revokes under threads, connections reset under
a holder, failover between endpoints (the faults every backend has:
semaphore_recipes/testing/contract)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.etcd_harness import EtcdHarness

from ..conftest import wait_until


def test_threads_cycling_on_one_backend_across_repeated_lease_revokes(ed: EtcdHarness) -> None:
    """Revokes land at any point of the threads' acquires (during the create txn, the
    reads, the wait, the held mark): each thread keeps cycling, grants resume after every
    revoke, and nothing is left behind (no entry, no lease but the backends' own)."""
    leases_before = ed.sessions()
    backend = ed.connect()
    sem = backend.semaphore("revokes", capacity=2)
    stop = threading.Event()
    grants = [0]
    lock = threading.Lock()
    failures: list[BaseException] = []

    def cycle(weight: int) -> None:
        while not stop.is_set():
            try:
                with sem.acquire(permits=weight, timeout=30), lock:
                    grants[0] += 1
            except BaseException as exc:
                failures.append(exc)
                return

    threads = [threading.Thread(target=cycle, args=(w,), daemon=True) for w in (1, 2, 1, 2)]
    for t in threads:
        t.start()

    def granted_since(floor: int, count: int) -> Callable[[], bool]:
        return lambda: grants[0] >= floor + count

    for _ in range(6):
        wait_until(granted_since(grants[0], 10), timeout=30)
        ed.expire_session(backend)
    wait_until(granted_since(grants[0], 20), timeout=30)  # and on after the last one
    stop.set()
    for t in threads:
        t.join(30)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)
    assert ed.entries() == []
    assert ed.sessions() - leases_before == {ed.session_of(backend)}


def test_a_holder_whose_connections_are_reset_is_suspended_before_anyone_else_is_granted(
    ed: EtcdHarness,
) -> None:
    """Connections reset (not black-holed): the channel cannot connect and the keepalive
    stream waits for it. The holder must still turn SUSPENDED within 2/3 of the TTL and
    never report HELD once another client holds its permit; LOST once it learns."""
    ttl = 3.0
    backend = ed.connect(proxied=True, session_timeout=ttl)
    permit = backend.semaphore("reset", capacity=1).acquire()
    other = ed.connect().semaphore("reset", capacity=1)
    ed.cut(backend)
    # the suspension comes 2/3 TTL after the last acknowledged keepalive (sent every
    # TTL/3), so at most 2/3 TTL after the cut; the margin is for a loaded machine
    wait_until(lambda: permit.state is not sr.PermitState.HELD, timeout=ttl * 2 / 3 + 1.5)
    state_after_cut = permit.state
    assert state_after_cut is sr.PermitState.SUSPENDED
    with pytest.raises(sr.PermitLost):
        permit.check()
    successor = other.acquire(timeout=ttl * 4)  # once the holder's lease has expired
    assert permit.state is not sr.PermitState.HELD
    ed.restore(backend)
    assert permit.lost.wait(ttl * 3), "the holder never learned that its lease is gone"
    assert permit.state is sr.PermitState.LOST
    successor.release()


def test_waiters_fail_over_to_another_endpoint(etcd_cluster: Any, sr_namespace: str) -> None:
    endpoints = ",".join(etcd_cluster.endpoints)
    url = f"etcd://{endpoints}{sr_namespace}?session_timeout=6"
    with sr.connect(url) as holder_backend, sr.connect(url) as waiter_backend:
        held = holder_backend.semaphore("failover", capacity=1).acquire()
        sem = waiter_backend.semaphore("failover", capacity=1)
        granted: list[int] = []

        def take_and_give_back() -> None:
            with sem.acquire(timeout=30) as permit:
                granted.append(permit.token)

        threads = [threading.Thread(target=take_and_give_back) for _ in range(3)]
        for t in threads:
            t.start()
        wait_until(lambda: len(sem.status().waiters) == 3)
        etcd_cluster.members[0].kill()  # the first endpoint: where the clients connected
        time.sleep(0.5)
        held.release()
        for t in threads:
            t.join(30)
        assert len(granted) == 3, f"only {len(granted)} of 3 waiters granted after the failover"
