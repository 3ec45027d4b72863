"""Faults on every backend, written once against the harness's verbs: a session that
ends under a waiter or a holder, a holder cut off, a create whose reply is lost or
that never reached the store, the leader killed under processes that cycle.

A scenario runs on every backend whose harness offers its verbs and is skipped, with
the harness's reason, on the others. What only one store has stays in
``tests/zookeeper`` and ``tests/etcd``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Cut, Harness, Verb
from semaphore_recipes.testing.leader_kill import cycle_through_a_leader_kill
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.services import needs
from semaphore_recipes.testing.waiters import waiter_thread
from semaphore_recipes.testing.workers import Workers


@pytest.mark.parametrize("reached_store", [True, False], ids=["reply-lost", "never-sent"])
def test_a_create_lost_on_the_way_leaves_exactly_one_entry(
    service: Harness, reached_store: bool
) -> None:
    """The create reaches the store and its reply is lost (or it never reaches the
    store); once the connection is back the acquire completes with one entry, its own:
    the entry the lost reply made is adopted, not orphaned, and no second is made."""
    needs(service, Verb.LOSE_NEXT_REPLY if reached_store else Verb.CUT)
    backend = service.connect(proxied=True, session_timeout=10)
    sem = backend.semaphore("lost-reply", capacity=2)
    if reached_store:
        service.lose_next_reply(backend)
    else:
        service.cut(backend, Cut.SILENT)
    t, out = waiter_thread(sem, timeout=30)
    if reached_store:
        wait_until(lambda: len(service.entries()) == 1)
    else:
        time.sleep(0.5)  # what the create had to reach the store, were it sent
        assert service.entries() == []
    service.restore(backend)
    t.join(30)
    assert out, "acquire did not complete after the connection came back"
    permit = out[0][1]
    entries = service.entries()
    assert [e.rsplit("/", 1)[1] for e in entries] == [permit.key]  # adopted, no second
    permit.release()


def test_a_waiter_whose_session_ends_enters_the_queue_again(
    service: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    needs(service, Verb.EXPIRE_SESSION)
    holder_sem = service.connect().semaphore("rewait", capacity=1)
    waiter_backend = service.connect()
    sem = waiter_backend.semaphore("rewait", capacity=1)
    held = holder_sem.acquire()
    t, out = waiter_thread(sem)
    wait_until(lambda: len(holder_sem.status().waiters) == 1)
    before = holder_sem.status().waiters[0].token
    with caplog.at_level(logging.WARNING, logger="semaphore_recipes"):
        service.expire_session(waiter_backend)
        wait_until(lambda: [w.token for w in holder_sem.status().waiters] not in ([], [before]))
    assert "entering the queue again" in caplog.text
    held.release()
    t.join(10)
    assert out and out[0][1].state is sr.PermitState.HELD
    out[0][1].release()


def test_a_holder_whose_session_ends_loses_its_permit(service: Harness) -> None:
    """LOST, unsafe, its fence refused, its release a no-op; another backend is granted,
    and the backend itself carries on with a new session."""
    needs(service, Verb.EXPIRE_SESSION)
    backend = service.connect()
    sem = backend.semaphore("expired-holder", capacity=1)
    permit = sem.acquire()
    service.expire_session(backend)
    assert permit.lost.wait(5), "permit.lost not set after the session ended"
    assert permit.state is sr.PermitState.LOST
    with pytest.raises(sr.PermitLost):
        permit.check()
    tx = permit.transaction()
    tx.create(backend.data_key("expired-holder", "fenced-after-expiry"), b"x")
    with pytest.raises(sr.PermitLost):
        tx.commit()
    permit.release()  # a no-op now, and no error
    other = service.connect().semaphore("expired-holder", capacity=1)
    other.acquire(timeout=5).release()
    sem.acquire(timeout=5).release()


@pytest.mark.parametrize("how", list(Cut), ids=[c.value for c in Cut])
def test_a_holder_cut_off_is_suspended_then_held_again(service: Harness, how: Cut) -> None:
    """Cut off for less than its session: SUSPENDED (and unsafe) once the backend
    notices, HELD again, never lost, when the connection comes back."""
    needs(service, Verb.CUT)
    # Noticed by the backend's own timeouts within 2/3 of the session (etcd's keeper: 8 s
    # here); the last third must hold the reconnect after restore(), whose gRPC backoff
    # reaches 2 s, on a loaded machine too.
    session_timeout = 12
    backend = service.connect(proxied=True, session_timeout=session_timeout)
    permit = backend.semaphore("cut", capacity=1).acquire()
    service.cut(backend, how)
    wait_until(lambda: permit.state is sr.PermitState.SUSPENDED, timeout=12)
    with pytest.raises(sr.PermitLost):
        permit.check()  # unsafe while suspended
    service.restore(backend)
    wait_until(lambda: permit.state is sr.PermitState.HELD, timeout=10)
    assert not permit.lost.is_set()
    permit.release()


def test_a_waiter_cut_off_briefly_keeps_its_place_in_the_queue(service: Harness) -> None:
    """A connection lost and back within the session costs a waiter nothing: its entry
    and its place stay, and it is granted before those who came after it. (kazoo drops
    every watch at a connection loss, firing it with a NONE event; the ZooKeeper driver
    took that for a session end and entered the queue again at the back.)"""
    needs(service, Verb.CUT)
    holder = service.connect().semaphore("place", capacity=1).acquire()
    first_backend = service.connect(proxied=True, session_timeout=12)
    first_sem = first_backend.semaphore("place", capacity=1)
    first, first_out = waiter_thread(first_sem)
    wait_until(lambda: len(first_sem.status().waiters) == 1)
    place = first_sem.status().waiters[0].key
    later, later_out = waiter_thread(service.connect().semaphore("place", capacity=1))
    wait_until(lambda: len(first_sem.status().waiters) == 2)
    service.cut(first_backend, Cut.RESET)
    time.sleep(1.0)  # the client notices a reset at once
    service.restore(first_backend)
    time.sleep(1.0)  # reconnected with the same session
    assert first_sem.status().waiters[0].key == place, "the first waiter moved"
    holder.release()
    first.join(15)
    assert first_out, "the first waiter was not granted"
    granted_at, permit = first_out[0]
    assert permit.key == place
    assert not later_out, "a later waiter was granted first"
    permit.release()
    later.join(15)
    assert later_out and later_out[0][0] >= granted_at
    later_out[0][1].release()


def test_killing_the_leader_while_processes_cycle(
    cluster: Harness, workers: Workers, tmp_path: Path
) -> None:
    """Never above capacity, work goes on under the new leader, nothing left behind."""
    needs(cluster, Verb.KILL_LEADER)
    cycle_through_a_leader_kill(cluster.url, workers, tmp_path, cluster.kill_leader)
    wait_until(lambda: cluster.entries() == [], timeout=15)
