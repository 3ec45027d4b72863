"""Job slots (``acquire(slot=True)``, issue 16) on real servers, both faces.

Redis keeps no slots yet: its parameters are left out of the store tests, and
``test_redis_refuses_slots_before_any_io`` asserts its named error instead.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time

import pytest

import semaphore_recipes as sr
from semaphore_recipes.backend import Deadline, Waiter
from semaphore_recipes.testing.faces import Face
from semaphore_recipes.testing.harness import Harness

from ..conftest import wait_until

STORES = ["memory", "zookeeper", "etcd"]  # Redis: no job slots yet (SlotsNotSupported)
slot_stores = pytest.mark.parametrize(
    "service",
    [(kind, face) for face in Face for kind in STORES],
    ids=lambda p: p[0] if p[1] is Face.SYNC else f"{p[0]}-aio",
    indirect=True,
)


def indices(permit: object) -> list[int]:
    return [slot.index for slot in permit.slots]  # type: ignore[attr-defined]


def slot_records(service: Harness, name: str) -> list[str]:
    """The semaphore's slot records in the store (``entries()`` lists them too)."""
    return [e for e in service.entries(name) if "+slot+" in e or "/slots/" in e]


@slot_stores
def test_slots_are_distinct_lowest_free_first_and_reused(service: Harness) -> None:
    sem = service.connect().semaphore("shards", capacity=4)
    a = sem.acquire(permits=2, slot=True)
    b = sem.acquire(slot=True)
    assert indices(a) == [0, 1] and indices(b) == [2]
    tokens = [s.token for s in (*a.slots, *b.slots)]
    assert all(isinstance(t, int) for t in tokens) and tokens == sorted(set(tokens))
    holders = {h.token: h.slots for h in sem.status().holders}
    assert holders == {a.token: (0, 1), b.token: (2,)}
    a.release()
    wait_until(lambda: len(slot_records(service, "shards")) == 1)  # a's went with its entry
    c = sem.acquire(slot=True)
    assert indices(c) == [0]  # the lowest freed slot
    assert c.slots[0].token > max(tokens)  # a new record: a new generation to fence with
    b.release()
    c.release()
    with sem.acquire(slot=True, timeout=0) as one_try:  # admitted: its slots' replies awaited
        assert indices(one_try) == [0]
    with sem.acquire(slot=True, blocking=False) as one_try:
        assert indices(one_try) == [0]
    assert service.entries() == []


@slot_stores
def test_without_slot_nothing_is_taken(service: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """No slot step reaches the store without ``slot=True``."""
    sem = service.connect().semaphore("plain", capacity=2)
    driver = sem.aio._store if hasattr(sem, "aio") else sem._store
    for hook in ("list_slots", "take_slot", "list_slots_async", "take_slot_async"):
        monkeypatch.setattr(driver, hook, None)  # a call would raise TypeError
    with sem.acquire() as permit:
        assert permit.slots == ()
        assert slot_records(service, "plain") == []
        assert sem.status().holders[0].slots == ()


@slot_stores
def test_slots_stay_distinct_under_churn(service: Harness) -> None:
    """Threads of two backends cycle weights 1-2 with slots on capacity 3; each grant's
    slots must be free in the checker and below the capacity."""
    backends = [service.connect(), service.connect()]
    sems = [b.semaphore("churn", capacity=3) for b in backends]
    held: set[int] = set()
    lock = threading.Lock()
    errors: list[str] = []
    grants = [0]
    stop = time.monotonic() + 2.5

    def cycle(sem: sr.Semaphore, seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop and not errors:
            permit = sem.acquire(permits=rng.randint(1, 2), timeout=20, slot=True)
            mine = set(indices(permit))
            with lock:
                if mine & held or max(mine) >= 3 or len(mine) != permit.permits:
                    errors.append(f"granted {sorted(mine)} while {sorted(held)} held")
                held.update(mine)
                grants[0] += 1
            time.sleep(rng.uniform(0, 0.01))
            with lock:
                held.difference_update(mine)
            permit.release()

    threads = [threading.Thread(target=cycle, args=(sems[i % 2], i), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert grants[0] > 20
    wait_until(lambda: service.entries() == [])


@slot_stores
def test_a_session_loss_frees_the_holders_slots(service: Harness) -> None:
    doomed = service.connect()
    lost = doomed.semaphore("expiring", capacity=2).acquire(permits=2, slot=True)
    assert indices(lost) == [0, 1]
    sem = service.connect().semaphore("expiring", capacity=2)
    waiting: list[object] = []
    waiter = threading.Thread(
        target=lambda: waiting.append(sem.acquire(timeout=30, slot=True)), daemon=True
    )
    waiter.start()
    wait_until(lambda: len(sem.status().waiters) == 1)
    service.expire_session(doomed)
    waiter.join(30)
    assert lost.lost.wait(10)
    assert [indices(p) for p in waiting] == [[0]]  # the lost holder's slot, reused
    waiting[0].release()  # type: ignore[attr-defined]
    wait_until(lambda: slot_records(service, "expiring") == [])


@slot_stores
def test_slots_after_a_capacity_decrease(service: Harness) -> None:
    """Holders keep slots at or above the new capacity; newcomers get free indices
    below it, and never one of those."""
    sem = service.connect().semaphore("shrink", capacity=3)
    a, b, c = (sem.acquire(slot=True) for _ in range(3))
    assert [indices(p) for p in (a, b, c)] == [[0], [1], [2]]
    sem.set_capacity(2)
    wait_until(lambda: sem.capacity == 2)
    a.release()
    b.release()
    d = sem.acquire(slot=True, timeout=10)  # c (slot 2) and d fill capacity 2
    assert indices(d) == [0]
    with pytest.raises(sr.WouldBlock):
        sem.acquire(slot=True, blocking=False)
    c.release()
    e = sem.acquire(slot=True, timeout=10)
    assert indices(e) == [1]
    d.release()
    e.release()
    assert service.entries() == []


@slot_stores
def test_leaving_while_taking_slots_leaves_no_record_and_no_entry(
    service: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An acquire interrupted (sync face: KeyboardInterrupt; asyncio: a CancelledError
    out of the store call) right after its first slot record was made deletes that
    record with its entry."""
    backend = service.connect()
    sem = backend.semaphore("irq", capacity=3)
    driver = sem.aio._store if hasattr(sem, "aio") else sem._store
    assert driver is not None
    interrupt: type[BaseException] = KeyboardInterrupt
    if hasattr(sem, "aio"):
        import asyncio

        interrupt = asyncio.CancelledError
        real_async = driver.take_slot_async

        async def then_interrupt(waiter: Waiter, index: int, deadline: Deadline) -> object:
            await real_async(waiter, index, deadline)
            raise interrupt

        monkeypatch.setattr(driver, "take_slot_async", then_interrupt)
    else:
        real = driver.take_slot

        def then_interrupt_sync(waiter: Waiter, index: int, deadline: Deadline) -> object:
            real(waiter, index, deadline)
            raise interrupt

        monkeypatch.setattr(driver, "take_slot", then_interrupt_sync)
    with pytest.raises(BaseException) as raised:
        sem.acquire(permits=2, slot=True, timeout=10)
    assert isinstance(raised.value, interrupt)
    wait_until(lambda: service.entries() == [])
    monkeypatch.undo()
    with sem.acquire(permits=2, slot=True, timeout=10) as permit:
        assert indices(permit) == [0, 1]


# (memory: the store lives in one process, so there is no other process to kill)
@pytest.mark.parametrize("service", ["zookeeper", "etcd"], indirect=True)
def test_a_killed_holder_frees_its_slots(service: Harness) -> None:
    url = service.url_with(session_timeout=2)
    script = (
        "import sys, time, semaphore_recipes as sr\n"
        "p = sr.connect(sys.argv[1]).semaphore('killed', capacity=2).acquire(slot=True)\n"
        "print('HELD', p.slots[0].index, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["HELD", "0"]
        sem = service.connect().semaphore("killed", capacity=2)
        with sem.acquire(slot=True) as other:
            assert indices(other) == [1]
        proc.kill()
        proc.wait(10)
        wait_until(lambda: service.entries() == [], timeout=2 + 5)
        with sem.acquire(slot=True) as again:
            assert indices(again) == [0]
    finally:
        proc.kill()
        proc.wait(10)


def test_redis_refuses_slots_before_any_io(redis_harness: Harness) -> None:
    sem = redis_harness.connect().semaphore("r", capacity=2)
    with pytest.raises(sr.SlotsNotSupported, match="redis"):
        sem.acquire(slot=True)
    assert redis_harness.entries() == []


@pytest.mark.parametrize("slot", [1, "yes", None])
def test_slot_is_a_bool(memory_harness: Harness, slot: object) -> None:
    sem = memory_harness.connect().semaphore("b", capacity=1)
    with pytest.raises(TypeError):
        sem.acquire(slot=slot)  # type: ignore[arg-type]


# (memory: nothing is lost in flight there, no reply to lose)
@pytest.mark.parametrize(
    "service",
    [(kind, face) for face in Face for kind in ("zookeeper", "etcd")],
    ids=lambda p: p[0] if p[1] is Face.SYNC else f"{p[0]}-aio",
    indirect=True,
)
def test_a_lost_reply_of_a_slot_create_adopts_the_record(
    service: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="semaphore_recipes")
    backend = service.connect(proxied=True, session_timeout=10)
    sem = backend.semaphore("lost-slot", capacity=2)
    driver = sem.aio._store if hasattr(sem, "aio") else sem._store
    assert driver is not None
    restored = threading.Timer(1.0, service.restore, (backend,))

    def lose_its_reply() -> None:
        service.lose_next_reply(backend)
        restored.start()

    if hasattr(sem, "aio"):
        real_async = driver.take_slot_async

        async def losing(waiter: Waiter, index: int, deadline: Deadline) -> object:
            lose_its_reply()
            return await real_async(waiter, index, deadline)

        monkeypatch.setattr(driver, "take_slot_async", losing)
    else:
        real = driver.take_slot

        def losing_sync(waiter: Waiter, index: int, deadline: Deadline) -> object:
            lose_its_reply()
            return real(waiter, index, deadline)

        monkeypatch.setattr(driver, "take_slot", losing_sync)
    permit = sem.acquire(slot=True, timeout=30)
    restored.join()
    assert indices(permit) == [0]
    assert "adopted it" in caplog.text  # the create landed; its reply did not
    assert len(slot_records(service, "lost-slot")) == 1  # adopted: no second record
    assert sem.status().holders[0].slots == (0,)
    permit.release()
    wait_until(lambda: service.entries() == [])
