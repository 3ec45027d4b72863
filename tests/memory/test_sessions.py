"""What a test can do to a memory session: expire it, disconnect and reconnect it, close
it; and what the permits, waiters and other sessions see."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import semaphore_recipes as sr

from ..conftest import wait_until, waiter_thread

Connect = Callable[..., sr.Client]


def test_expire_session_loses_the_permits_and_lets_the_next_in_at_once(
    memory_backend: Connect,
) -> None:
    a, b = memory_backend(), memory_backend()
    held = a.semaphore("x", capacity=1).acquire(watch_entry=True)
    fence = held.transaction().create("/x-done", b"1")
    t, out = waiter_thread(b.semaphore("x", capacity=1), timeout=10)
    wait_until(lambda: len(b.status("x").waiters) == 1)
    old_session = a.session

    a.expire_session()

    # told before expire_session() returns: no waiting, nothing timed
    assert held.state is sr.PermitState.LOST and held.lost.is_set()
    assert a.session != old_session and a.session_state is sr.SessionState.CONNECTED
    with pytest.raises(sr.PermitLost):
        fence.commit()
    assert a.read("/x-done") is None
    t.join(10)
    [(_, granted)] = out
    assert granted.token > held.token and granted.state is sr.PermitState.HELD
    assert [h.token for h in a.status("x").holders] == [granted.token]
    held.release()  # a LOST permit's release: nothing to do, no error
    granted.release()
    # the backend goes on with its new session
    a.semaphore("x", capacity=1).acquire(blocking=False).release()


def test_an_expiry_tells_the_sessions_permits_before_anyone_sees_its_entries_go(
    memory_backend: Connect,
) -> None:
    """A waiter of the session that wakes on the deletion of the session's entries must
    find the session's end already told (else it could be granted on a dead session)."""
    backend = memory_backend()
    permit = backend.semaphore("order", capacity=1).acquire()
    told: list[str] = []
    backend.add_permit_listener(lambda event: told.append(event.change.value))
    path = backend.semaphore_path("order")
    backend.store.watch_entries(
        path, [permit.key], lambda key: lambda entry: told.append("deleted")
    )

    backend.expire_session()

    assert told == ["lost", "deleted"]


def test_waiters_of_an_expired_session_queue_again_behind_the_others(
    memory_backend: Connect,
) -> None:
    holder_backend, expiring, other = memory_backend(), memory_backend(), memory_backend()
    holder = holder_backend.semaphore("q", capacity=1).acquire()
    t1, first = waiter_thread(expiring.semaphore("q", capacity=1), timeout=10)
    wait_until(lambda: len(holder_backend.status("q").waiters) == 1)
    t2, second = waiter_thread(other.semaphore("q", capacity=1), timeout=10)
    wait_until(lambda: len(holder_backend.status("q").waiters) == 2)
    [old_entry, other_entry] = holder_backend.status("q").waiters

    expiring.expire_session()

    wait_until(lambda: len(holder_backend.status("q").waiters) == 2)
    waiters = holder_backend.status("q").waiters
    assert waiters[0] == other_entry  # now first in line
    assert waiters[1].token > other_entry.token and waiters[1].key != old_entry.key
    holder.release()
    t2.join(10)
    assert second and not first  # FIFO: the one that kept its place goes first
    second[0][1].release()
    t1.join(10)
    assert first and first[0][1].state is sr.PermitState.HELD
    first[0][1].release()


def test_disconnect_suspends_permits_bounds_every_call_and_reconnect_restores(
    memory_backend: Connect, memory_url: str
) -> None:
    a = memory_backend(url=f"{memory_url}?request_timeout=0.3")
    b = memory_backend()
    sem = a.semaphore("d", capacity=2)
    held, released = sem.acquire(), sem.acquire()
    events: list[sr.SessionChange] = []
    a.add_permit_listener(lambda event: events.append(event.change))

    a.disconnect()

    assert a.session_state.value == "suspended"
    assert held.state.value == "suspended"
    with pytest.raises(sr.PermitLost):
        held.check()
    for call in (
        sem.status,
        lambda: sem.set_capacity(3),
        lambda: a.semaphore("other", capacity=1),
        lambda: a.read("/k"),
        lambda: held.transaction().create("/k", b"v").commit(),
        lambda: sem.acquire(timeout=0),
    ):
        start = time.monotonic()
        with pytest.raises(sr.BackendUnavailable):
            call()
        assert time.monotonic() - start < 0.3 + 2.0  # the request timeout, and no more
    with pytest.raises(sr.AcquireTimeout):
        sem.acquire(timeout=0.5)  # past its first round: its own deadline bounds it
    released.release()  # returns at once; the delete is sent on reconnect
    assert released.state is sr.PermitState.RELEASED
    assert len(b.status("d").holders) == 2  # the store has not heard of it yet

    a.reconnect()

    assert a.session_state.value == "connected"
    assert held.state is sr.PermitState.HELD
    assert events == [sr.SessionChange.SUSPENDED, sr.SessionChange.RESTORED]
    assert [h.token for h in b.status("d").holders] == [held.token]  # the release arrived
    tx = held.transaction()
    tx.create("/k", b"v")
    tx.commit()
    assert b.read("/k") == b"v"
    held.release()


def test_a_waiting_acquire_goes_on_after_a_reconnect(memory_backend: Connect) -> None:
    a, b = memory_backend(), memory_backend()
    holder = b.semaphore("w", capacity=1).acquire()
    t, out = waiter_thread(a.semaphore("w", capacity=1), timeout=10)
    wait_until(lambda: len(b.status("w").waiters) == 1)
    a.disconnect()
    holder.release()  # the waiter's watch fires; its next request waits for the network
    a.reconnect()
    t.join(10)
    assert out and out[0][1].state is sr.PermitState.HELD
    out[0][1].release()


def test_close_ends_the_session_and_every_later_call(memory_backend: Connect) -> None:
    a, b = memory_backend(), memory_backend()
    sem = a.semaphore("c", capacity=1)
    held = sem.acquire()
    failures: list[BaseException] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        try:
            a.semaphore("c2", capacity=1).acquire(timeout=10)
        except BaseException as exc:
            failures.append(exc)

    blocker = b.semaphore("c2", capacity=1).acquire()
    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: len(b.status("c2").waiters) == 1)

    a.close()

    assert held.state is sr.PermitState.LOST
    assert b.status("c").holders == () and b.status("c2").waiters == ()
    t.join(10)
    assert len(failures) == 1 and isinstance(failures[0], sr.BackendUnavailable)
    assert a.session_state is sr.SessionState.CLOSED
    for call in (
        sem.status,
        lambda: sem.acquire(timeout=1),
        lambda: a.semaphore("c", capacity=1),
        lambda: a.read("/k"),
        a.expire_session,
        a.disconnect,
    ):
        with pytest.raises(sr.BackendUnavailable):
            call()
    held.release()  # never raises
    a.close()  # idempotent
    blocker.release()


def test_a_lowered_capacity_reaches_every_backend_of_the_store(memory_backend: Connect) -> None:
    backends = [memory_backend() for _ in range(3)]
    sems = [backend.semaphore("cap", capacity=3) for backend in backends]
    sems[0].set_capacity(1)
    assert [s.capacity for s in sems] == [1, 1, 1]  # synchronously, everywhere
    with pytest.raises(sr.CapacityMismatch):
        backends[1].semaphore("cap", capacity=3)
    with pytest.raises(ValueError):
        sems[2].set_capacity(0)


def test_threads_of_several_backends_never_hold_more_than_the_capacity(
    memory_backend: Connect,
) -> None:
    """Eight threads on two backends cycle weighted acquires: never above the capacity,
    every grant held, and nothing left behind."""
    capacity, rounds = 3, 40
    backends = [memory_backend(), memory_backend()]
    lock = threading.Lock()
    inside = [0, 0]  # weight held now, and the most ever
    failures: list[BaseException] = []

    def work(index: int) -> None:
        sem = backends[index % 2].semaphore("many", capacity=capacity)
        weight = 1 + index % 2
        try:
            for _ in range(rounds):
                with sem.acquire(permits=weight, timeout=30) as permit:
                    assert permit.state is sr.PermitState.HELD
                    with lock:
                        inside[0] += weight
                        inside[1] = max(inside[1], inside[0])
                    time.sleep(0.001)  # hold it a moment, as users do
                    with lock:
                        inside[0] -= weight
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert 0 < inside[1] <= capacity
    assert backends[0].status("many").holders == ()
