"""The Semaphore/Permit contract on real servers (every backend)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.checker import read_checker
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.interrupts import interrupt_acquires
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.workers import Workers


def test_weighted_cycles_in_six_processes_never_exceed_capacity(
    service: Harness, workers: Workers, tmp_path: Path
) -> None:
    checker = tmp_path / "checker.json"
    checker.write_text("")
    procs = [
        workers.start(
            service.url,
            "pool",
            "3",
            "cycle",
            "--weights",
            "1,2",
            "--seconds",
            "4",
            "--checker",
            str(checker),
        )
        for _ in range(6)
    ]
    cycles = [int(Workers.expect(p, "CYCLES", timeout=60).split()[1]) for p in procs]
    for p in procs:
        assert p.wait(10) == 0
    state = read_checker(checker)
    assert state["now"] == 0
    assert state["max"] <= 3, state  # never above capacity
    assert state["max"] >= 2, state  # and holders really overlapped
    assert state["grants"] == sum(cycles) and min(cycles) > 0


def test_fifo_across_processes(service: Harness, workers: Workers, tmp_path: Path) -> None:
    sem = service.connect().semaphore("fifo", capacity=1)
    order = tmp_path / "order"
    holder = sem.acquire()
    labels = [f"w{i}" for i in range(5)]
    for i, label in enumerate(labels):
        p = workers.start(
            service.url,
            "fifo",
            "1",
            "wait",
            "--order-file",
            str(order),
            "--label",
            label,
            "--hold",
            "0.05",
        )
        Workers.expect(p, "WAITING")
        wait_until(lambda: len(sem.status().waiters) == i + 1)  # noqa: B023
    holder.release()
    for p in workers.procs:
        assert p.wait(30) == 0
    assert order.read_text().split() == labels


def test_a_blocked_large_request_is_not_overtaken(
    service: Harness, workers: Workers, tmp_path: Path
) -> None:
    sem = service.connect().semaphore("big", capacity=3)
    order = tmp_path / "order"
    holder = sem.acquire(permits=2)
    big = workers.start(
        service.url,
        "big",
        "3",
        "wait",
        "--permits",
        "3",
        "--order-file",
        str(order),
        "--label",
        "big",
        "--hold",
        "0.2",
    )
    wait_until(lambda: len(sem.status().waiters) == 1)
    small = workers.start(
        service.url,
        "big",
        "3",
        "wait",
        "--permits",
        "1",
        "--order-file",
        str(order),
        "--label",
        "small",
    )
    wait_until(lambda: len(sem.status().waiters) == 2)
    time.sleep(1.0)  # the small one would fit now (2 + 1 <= 3) but must wait its turn
    assert not order.exists()
    holder.release()
    assert big.wait(30) == 0 and small.wait(30) == 0
    assert order.read_text().split() == ["big", "small"]


@pytest.mark.parametrize("capacity", [2, 3])
def test_releasing_any_holder_wakes_the_head(service: Harness, capacity: int) -> None:
    sem = service.connect().semaphore("ooo", capacity=capacity)
    for released in range(capacity):  # release the lowest, a middle one, the highest
        holders = [sem.acquire() for _ in range(capacity)]
        granted = threading.Event()
        result: list[sr.Permit] = []

        def wait(result: list[sr.Permit] = result, granted: threading.Event = granted) -> None:
            result.append(sem.acquire(timeout=10))
            granted.set()

        t = threading.Thread(target=wait)
        t.start()
        wait_until(lambda: len(sem.status().waiters) == 1)
        assert not granted.wait(0.3)
        holders[released].release()
        assert granted.wait(5), f"releasing holder {released} did not wake the head"
        t.join()
        for p in [*holders, *result]:
            p.release()


def test_timeout_removes_the_entry(service: Harness) -> None:
    sem = service.connect().semaphore("t", capacity=1)
    with sem.acquire():
        start = time.monotonic()
        with pytest.raises(sr.AcquireTimeout):
            sem.acquire(timeout=0.5)
        assert 0.45 <= time.monotonic() - start < 3
        assert len(service.entries()) == 1  # only the holder's
    assert service.entries() == []


def test_would_block_removes_the_entry(service: Harness) -> None:
    sem = service.connect().semaphore("nb", capacity=2)
    with sem.acquire(permits=2), pytest.raises(sr.WouldBlock):
        sem.acquire(blocking=False)
    assert service.entries() == []
    with sem.acquire(blocking=False) as p:
        assert p.state is sr.PermitState.HELD


def test_an_exception_in_the_with_block_releases(service: Harness) -> None:
    sem = service.connect().semaphore("exc", capacity=1)
    with pytest.raises(ZeroDivisionError), sem.acquire() as permit:
        1 / 0  # noqa: B018
    assert permit.state is sr.PermitState.RELEASED
    assert service.entries() == []


def test_keyboard_interrupt_while_waiting_removes_the_entry(service: Harness) -> None:
    sem = service.connect().semaphore("kbd", capacity=1)
    with sem.acquire():
        # a real SIGINT: interrupt_main() alone is only seen once the waiting call
        # returns by itself (after its whole timeout), not while it blocks
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            sem.acquire(timeout=10)
        timer.join()
        assert len(service.entries()) == 1
    assert service.entries() == []


def test_a_killed_waiter_leaves_no_entry(service: Harness, workers: Workers) -> None:
    sem = service.connect().semaphore("killed", capacity=1)
    with sem.acquire():
        p = workers.start(
            service.url_with(session_timeout=2), "killed", "1", "wait", "--order-file", "/dev/null"
        )
        wait_until(lambda: len(sem.status().waiters) == 1)
        p.kill()
        wait_until(lambda: len(service.entries()) == 1, timeout=2 + 3)
    assert service.entries() == []


def test_status_shows_holders_and_waiters_in_queue_order(service: Harness) -> None:
    backend = service.connect(owner="me@test")
    sem = backend.semaphore("st", capacity=3)
    a = sem.acquire(permits=2)
    b = sem.acquire(permits=1)
    assert a.token < b.token
    t = threading.Thread(target=lambda: sem.acquire(permits=2, timeout=10).release())
    t.start()
    wait_until(lambda: len(sem.status().waiters) == 1)
    st = sem.status()
    assert st.capacity == 3 and st.used == 3
    assert [(h.permits, h.token, h.owner) for h in st.holders] == [
        (2, a.token, "me@test"),
        (1, b.token, "me@test"),
    ]
    assert st.waiters[0].permits == 2 and st.waiters[0].token > b.token
    a.release()
    t.join(10)
    b.release()


def test_set_capacity_wakes_waiters_and_is_shared(service: Harness) -> None:
    sem = service.connect().semaphore("cap", capacity=1)
    other = service.connect().semaphore("cap", capacity=1)
    held = sem.acquire()
    got: list[sr.Permit] = []
    t = threading.Thread(target=lambda: got.append(other.acquire(timeout=10)))
    t.start()
    wait_until(lambda: len(sem.status().waiters) == 1)
    sem.set_capacity(2)
    t.join(10)
    assert got and got[0].state is sr.PermitState.HELD
    wait_until(lambda: other.capacity == 2)
    with pytest.raises(sr.CapacityMismatch):
        service.connect().semaphore("cap", capacity=1)
    assert service.connect().semaphore("cap", capacity=1, adopt_capacity=True).capacity == 2
    held.release()
    got[0].release()


def test_release_is_idempotent_and_check_reports_the_state(service: Harness) -> None:
    sem = service.connect().semaphore("idem", capacity=1)
    permit = sem.acquire()
    permit.check()
    permit.release()
    permit.release()
    assert permit.state is sr.PermitState.RELEASED
    with pytest.raises(sr.PermitLost):
        permit.check()
    assert sem.acquire(timeout=2).release() is None  # type: ignore[func-returns-value]


def test_fenced_transaction_commits_only_while_held(service: Harness) -> None:
    backend = service.connect()
    sem = backend.semaphore("fence", capacity=1)
    permit = sem.acquire()
    tx = permit.transaction()
    # (etcd keys are the server's own: unique)
    tx.create(backend.data_key("fence", f"ok-{uuid.uuid4().hex}"), b"1")
    tx.commit()
    permit.release()
    tx = permit.transaction()
    tx.create(backend.data_key("fence", "late"), b"1")
    with pytest.raises(sr.PermitLost):
        tx.commit()


@pytest.mark.parametrize("name", ["a/b", "..", ".", "a\x00b", "x" * 129, "", "sp ace", "../../etc"])
def test_bad_names_fail_before_any_write(service: Harness, name: str) -> None:
    backend = service.connect()
    with pytest.raises(sr.InvalidName):
        backend.semaphore(name, capacity=1)
    assert service.entries() == []


@pytest.mark.parametrize("capacity", [0, -1])
def test_bad_capacity(service: Harness, capacity: int) -> None:
    with pytest.raises(ValueError):
        service.connect().semaphore("c", capacity=capacity)


@pytest.mark.parametrize("permits", [0, -1, 4])
def test_permits_outside_one_to_capacity(service: Harness, permits: int) -> None:
    sem = service.connect().semaphore("p", capacity=3)
    with pytest.raises(ValueError):
        sem.acquire(permits=permits)
    assert service.entries() == []


def test_bad_timeout(service: Harness) -> None:
    sem = service.connect().semaphore("to", capacity=3)
    with pytest.raises(ValueError):
        sem.acquire(timeout=-1)
    assert service.entries() == []


def test_an_unreachable_server_is_backend_unavailable(service: Harness) -> None:
    if service.kind == "memory":
        pytest.skip("an in-process memory store has no server to be unreachable")
    url = service.unreachable_url()
    start = time.monotonic()
    with pytest.raises(sr.BackendUnavailable):
        sr.connect(url)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    "url",
    [
        "zookeeper://",
        "nosuch://h:1",
        "zookeeper://h:99999",
        "zookeeper://h:x",
        "redis://h:1/x",
        "redis://h:99999",
        "redis://h1:1,h2:1",
        "redis://h:1?prefix=a%20b",
        "redis://h:1?ca=x",
    ],
)
def test_malformed_urls_fail_before_io(url: str) -> None:
    with pytest.raises(ValueError):
        sr.connect(url)


def test_interrupts_at_any_point_of_an_acquire_leave_nothing_behind(service: Harness) -> None:
    """KeyboardInterrupt at random moments: during the create, the listing, the watch
    reads, the wait. Every interrupted acquire cleans up after itself."""
    if service.kind == "memory":
        pytest.skip(
            "a memory acquire is over in microseconds, too soon for a timer to land inside "
            "it (tests/memory interrupts each of its steps instead)"
        )

    sem = service.connect().semaphore("irq", capacity=2)
    holder = sem.acquire()
    interrupted, _ = interrupt_acquires(lambda: sem.acquire(timeout=5), seed=7)
    assert interrupted >= 8  # the interrupts really landed inside acquire
    wait_until(lambda: len(service.entries()) == 1)  # only the holder's entry
    assert sem.status().holders[0].token == holder.token
    holder.release()


def test_deadlines_that_expire_mid_round_trip_leave_nothing_behind(service: Harness) -> None:
    sem = service.connect().semaphore("zero", capacity=1)
    with sem.acquire():
        for _ in range(30):
            with pytest.raises(sr.AcquireTimeout):
                sem.acquire(timeout=0)
        wait_until(lambda: len(service.entries()) == 1)
    wait_until(lambda: service.entries() == [])


def test_watch_entry_reports_a_deletion_from_outside_at_once(service: Harness) -> None:
    sem = service.connect().semaphore("watched", capacity=1)
    permit = sem.acquire(watch_entry=True)
    plain = service.connect().semaphore("watched-too", capacity=1).acquire()
    [entry] = [e for e in service.entries() if "/watched/" in e]
    deleted = time.monotonic()
    delete_from_outside(service, entry)
    assert permit.lost.wait(2), "deleting the entry did not set permit.lost"
    assert time.monotonic() - deleted < 1.0
    assert permit.state is sr.PermitState.LOST
    permit.release()  # no error, nothing to do
    plain.release()
    assert not plain.lost.is_set()


def delete_from_outside(service: Harness, entry: str) -> None:
    service.delete_entry(entry)
