"""etcd-specific faults: crashes, pauses, revoked leases, lost replies, member loss."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.plugin import leftover_etcd_entries
from semaphore_recipes.testing.proxy import FaultProxy

from ..conftest import (
    Service,
    Workers,
    cycle_through_a_leader_kill,
    wait_until,
    waiter_thread,
)


def test_a_lease_revoked_from_outside_loses_the_permit(ed: Service, etcd_admin: Any) -> None:
    backend = ed.connect(session_timeout=3)
    permit = backend.semaphore("revoked", capacity=1).acquire()
    etcd_admin.lease_revoke(backend.lease_id)
    assert permit.lost.wait(5), "permit.lost not set after the lease was revoked"
    assert permit.state is sr.PermitState.LOST
    tx = permit.transaction()
    tx.create("/fenced-after-revoke", b"x")
    with pytest.raises(sr.PermitLost):
        tx.commit()
    other = ed.connect().semaphore("revoked", capacity=1)
    other.acquire(timeout=5).release()
    # the backend carries on with a new lease
    backend.semaphore("revoked", capacity=1).acquire(timeout=5).release()


def test_a_waiter_whose_lease_is_revoked_enters_the_queue_again(
    ed: Service, etcd_admin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    holder_sem = ed.connect().semaphore("rewait", capacity=1)
    waiter_backend = ed.connect()
    sem = waiter_backend.semaphore("rewait", capacity=1)
    held = holder_sem.acquire()
    t, out = waiter_thread(sem)
    wait_until(lambda: len(holder_sem.status().waiters) == 1)
    before = holder_sem.status().waiters[0].token
    with caplog.at_level(logging.WARNING, logger="semaphore_recipes"):
        etcd_admin.lease_revoke(waiter_backend.lease_id)
        wait_until(lambda: [w.token for w in holder_sem.status().waiters] not in ([], [before]))
    assert "entering the queue again" in caplog.text
    held.release()
    t.join(10)
    assert out and out[0][1].state is sr.PermitState.HELD
    out[0][1].release()


def test_threads_cycling_on_one_backend_across_repeated_lease_revokes(
    ed: Service, etcd_admin: Any
) -> None:
    """Revokes land at any point of the threads' acquires (during the create txn, the
    reads, the wait, the held mark): each thread keeps cycling, grants resume after every
    revoke, and nothing is left behind (no entry, no lease but the backends' own)."""
    from semaphore_recipes.testing.plugin import alive_etcd_leases

    leases_before = alive_etcd_leases(etcd_admin)
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
        etcd_admin.lease_revoke(backend.lease_id)
    wait_until(granted_since(grants[0], 20), timeout=30)  # and on after the last one
    stop.set()
    for t in threads:
        t.join(30)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)
    assert ed.entries() == []
    assert alive_etcd_leases(etcd_admin) - leases_before == {backend.lease_id}


def test_a_lost_create_reply_leaves_one_entry(
    ed: Service, etcd_server: Any, etcd_admin: Any, sr_namespace: str
) -> None:
    proxy = FaultProxy(etcd_server.endpoint)
    proxy.start()
    backend = ed.connect(url=f"etcd://{proxy.address}{sr_namespace}?session_timeout=10")
    try:
        sem = backend.semaphore("lost-reply", capacity=2)
        proxy.drop_replies()  # the txn reaches etcd, its reply does not come back
        t, out = waiter_thread(sem, timeout=30)
        wait_until(lambda: len(leftover_etcd_entries(etcd_admin, sr_namespace)) == 1)
        proxy.cut()
        time.sleep(0.3)
        proxy.restore()
        t.join(30)
        assert out, "acquire did not complete after the connection came back"
        permit = out[0][1]
        entries = leftover_etcd_entries(etcd_admin, sr_namespace)
        assert [e.rsplit("/", 1)[1] for e in entries] == [permit.key]  # adopted, no second
        permit.release()
    finally:
        backend.close()
        proxy.close()


def test_a_holder_cut_off_is_suspended_then_held_again(
    ed: Service, etcd_server: Any, sr_namespace: str
) -> None:
    proxy = FaultProxy(etcd_server.endpoint)
    proxy.start()
    backend = ed.connect(url=f"etcd://{proxy.address}{sr_namespace}?session_timeout=6")
    try:
        permit = backend.semaphore("cut", capacity=1).acquire()
        proxy.blackhole()
        wait_until(lambda: permit.state is sr.PermitState.SUSPENDED, timeout=8)
        with pytest.raises(sr.PermitLost):
            permit.check()
        proxy.cut()
        proxy.restore()
        wait_until(lambda: permit.state is sr.PermitState.HELD, timeout=8)
        assert not permit.lost.is_set()
        permit.release()
    finally:
        backend.close()
        proxy.close()


def test_a_holder_whose_connections_are_reset_is_suspended_before_anyone_else_is_granted(
    ed: Service, etcd_server: Any, sr_namespace: str
) -> None:
    """Connections reset (not black-holed): the channel cannot connect and the keepalive
    stream waits for it. The holder must still turn SUSPENDED within 2/3 of the TTL and
    never report HELD once another client holds its permit; LOST once it learns."""
    ttl = 3.0
    proxy = FaultProxy(etcd_server.endpoint)
    proxy.start()
    backend = ed.connect(url=f"etcd://{proxy.address}{sr_namespace}?session_timeout={ttl:g}")
    try:
        permit = backend.semaphore("reset", capacity=1).acquire()
        other = ed.connect().semaphore("reset", capacity=1)
        proxy.cut()
        # the suspension comes 2/3 TTL after the last acknowledged keepalive (sent every
        # TTL/3), so at most 2/3 TTL after the cut; the margin is for a loaded machine
        wait_until(lambda: permit.state is not sr.PermitState.HELD, timeout=ttl * 2 / 3 + 1.5)
        state_after_cut = permit.state
        assert state_after_cut is sr.PermitState.SUSPENDED
        with pytest.raises(sr.PermitLost):
            permit.check()
        successor = other.acquire(timeout=ttl * 4)  # once the holder's lease has expired
        assert permit.state is not sr.PermitState.HELD
        proxy.restore()
        assert permit.lost.wait(ttl * 3), "the holder never learned that its lease is gone"
        assert permit.state is sr.PermitState.LOST
        successor.release()
    finally:
        backend.close()
        proxy.close()


def test_killing_the_leader_of_a_cluster_while_processes_cycle(
    etcd_cluster: Any, sr_namespace: str, workers: Workers, tmp_path: Path
) -> None:
    url = f"etcd://{','.join(etcd_cluster.endpoints)}{sr_namespace}?session_timeout=6"
    cycle_through_a_leader_kill(url, workers, tmp_path, lambda: etcd_cluster.leader().kill())
    from semaphore_recipes.etcd.client import EtcdClient

    alive = [m.endpoint for m in etcd_cluster.members if m.running]
    with EtcdClient(alive) as admin:
        wait_until(lambda: leftover_etcd_entries(admin, sr_namespace) == [], timeout=15)


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
