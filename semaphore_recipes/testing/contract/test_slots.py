"""Job slots (``acquire(slot=True)``, issue 16) on real servers, both faces.

Redis decides slots in the script that admits the entry (no ``list_slots`` or
``take_slot`` step): the tests that interrupt or lose those steps leave it out.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
import uuid

import pytest

import semaphore_recipes as sr
from semaphore_recipes._url import parse_url
from semaphore_recipes.backend import Capabilities, Deadline, Program, QueueDriver, Waiter
from semaphore_recipes.memory.backend import MemoryBackend
from semaphore_recipes.testing.faces import Face
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.interrupts import interrupt_acquires
from semaphore_recipes.testing.polling import wait_until

STORES = [
    "memory",
    "zookeeper",
    "etcd",
    "redis",
    "redis+sentinel",
    "redis+cluster",
    "postgresql",
    "mysql",
]


def _stores(*kinds: str) -> pytest.MarkDecorator:
    """The ``service`` fixture on ``kinds``, through both faces."""
    return pytest.mark.parametrize(
        "service",
        [(kind, face) for face in Face for kind in kinds],
        ids=lambda p: p[0] if p[1] is Face.SYNC else f"{p[0]}-aio",
        indirect=True,
    )


slot_stores = _stores(*STORES)
# (memory: nothing is lost in flight, and an acquire is over before a timer lands in it)
networked = _stores("zookeeper", "etcd")  # (Redis: no slot step to lose or interrupt)
# the stores whose slots are taken by steps after admission (ListSlots, TakeSlot): Redis
# gives them in the admitting script
slot_step_stores = _stores("memory", "zookeeper", "etcd", "postgresql", "mysql")


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
    for hook in ("list_slots", "take_slot"):
        monkeypatch.setattr(driver, hook, None)  # a call would raise TypeError
    with sem.acquire() as permit:
        assert permit.slots == ()
        assert slot_records(service, "plain") == []
        assert sem.status().holders[0].slots == ()


@slot_stores
def test_slots_stay_distinct_under_churn(service: Harness) -> None:
    """Threads of two backends cycle weights 1-2 with slots on capacity 3, and one
    backend's session is expired midway. Each grant's slots must be below the capacity
    and free in the checker, but for those of a permit of the expired session (its
    records went with it before its thread could know)."""
    backends = [service.connect(), service.connect()]
    sems = [b.semaphore("churn", capacity=3) for b in backends]
    # index -> (the backend, when its acquire began) of the permit holding it in the
    # checker (began, not granted: a grant the store made just before the expiry may be
    # noted here just after it, and its slots are then rightly handed out again)
    held: dict[int, tuple[int, float]] = {}
    # (holder, newcomer): an index granted while another permit held it in the checker
    overlapped: list[tuple[tuple[int, float], tuple[int, float]]] = []
    lock = threading.Lock()
    errors: list[str] = []
    grants = [0]
    stop = time.monotonic() + 2.5

    def cycle(which: int, seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop and not errors:
            began = time.monotonic()
            permit = sems[which].acquire(permits=rng.randint(1, 2), timeout=20, slot=True)
            mine = set(indices(permit))
            me = (which, began)
            with lock:
                if max(mine) >= 3 or len(mine) != permit.permits:
                    errors.append(f"granted {sorted(mine)} of capacity 3")
                overlapped.extend((held[i], me) for i in mine if i in held)
                held.update(dict.fromkeys(mine, me))
                grants[0] += 1
            time.sleep(rng.uniform(0, 0.01))
            with lock:
                for i in mine:
                    if held.get(i) is me:
                        del held[i]
            permit.release()

    threads = [threading.Thread(target=cycle, args=(i % 2, i), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    service.expire_session(backends[0])
    expired = time.monotonic()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert grants[0] > 20
    # either one may be the expired session's: a grant the store made before the expiry
    # is noted here after another's that the expiry's freed slots admitted, or before it
    shared = [p for p in overlapped if not any(b == 0 and t < expired for b, t in p)]
    assert not shared, f"holders {shared} shared a slot (expired at {expired})"
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
    # on a new session (the old one's requests fail): a LOST permit's release deletes
    # what may be left of it, and must not take the index now held by another
    # (etcd and memory make their new session on the next request)
    renewed = {sr.SessionState.CONNECTED}
    if service.kind != "zookeeper":
        renewed.add(sr.SessionState.EXPIRED)
    wait_until(lambda: doomed.session_state in renewed)
    lost.release()
    assert [h.slots for h in sem.status().holders] == [(0,)]  # not the new holder's record
    assert len(slot_records(service, "expiring")) == 1
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


def _driver(sem: object) -> QueueDriver:
    """The queue driver behind a semaphore of either face."""
    aio = getattr(sem, "aio", None)
    driver = aio._store if aio is not None else sem._store  # type: ignore[attr-defined]
    assert isinstance(driver, QueueDriver)
    return driver


def _interrupt(sem: object) -> type[BaseException]:
    """What an interrupt is on the semaphore's face."""
    import asyncio

    return asyncio.CancelledError if hasattr(sem, "aio") else KeyboardInterrupt


def _interrupted_acquire_leaves_nothing(service: Harness, sem: object) -> None:
    with pytest.raises(_interrupt(sem)):
        sem.acquire(permits=2, slot=True, timeout=10)  # type: ignore[attr-defined]
    wait_until(lambda: service.entries() == [])


@slot_step_stores
def test_leaving_while_taking_slots_leaves_no_record_and_no_entry(
    service: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An acquire interrupted (sync face: KeyboardInterrupt; asyncio: a CancelledError)
    once its first slot record was made deletes that record with its entry."""
    sem = service.connect().semaphore("irq", capacity=3)
    driver, interrupt = _driver(sem), _interrupt(sem)
    real = driver.take_slot

    def then_interrupt(waiter: Waiter, index: int, deadline: Deadline) -> Program[object]:
        yield from real(waiter, index, deadline)
        raise interrupt

    monkeypatch.setattr(driver, "take_slot", then_interrupt)
    _interrupted_acquire_leaves_nothing(service, sem)
    monkeypatch.undo()
    with sem.acquire(permits=2, slot=True, timeout=10) as permit:
        assert indices(permit) == [0, 1]


# (memory: its records die with their entry in the store, with no note of a driver's)
@networked
def test_an_interrupt_between_a_slots_reply_and_its_note_leaves_nothing(
    service: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted between the store's reply to a slot create and the driver noting it
    (as when the interrupt lands while the reply is on its way), the record is found by
    the entry it names and deleted with the entry."""
    sem = service.connect().semaphore("irq-noted", capacity=3)
    driver, interrupt = _driver(sem), _interrupt(sem)
    real_noted = driver.slot_answered

    def interrupted_noting(key: str, index: int, token: int | None) -> None:
        if token is not None:
            raise interrupt
        real_noted(key, index, token)

    monkeypatch.setattr(driver, "slot_answered", interrupted_noting)
    _interrupted_acquire_leaves_nothing(service, sem)


# (memory: the store lives in one process, so there is no other process to kill)
@pytest.mark.parametrize(
    "service", ["zookeeper", "etcd", "redis", "postgresql", "mysql"], indirect=True
)
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


class _NoSlots(MemoryBackend):
    """A third-party backend as it may be written: without job slots."""

    scheme = "noslots"
    capabilities = Capabilities(async_face=True, acquire_all=True)


def test_a_backend_without_slots_refuses_them_before_any_io() -> None:
    url = parse_url(f"memory://ns{uuid.uuid4().hex[:8]}")
    with sr.Client(_NoSlots.from_url(url)) as backend:
        sem = backend.semaphore("ns", capacity=2)
        with pytest.raises(sr.SlotsNotSupported, match="noslots"):
            sem.acquire(slot=True)
        assert sem.status().holders == sem.status().waiters == ()


@pytest.mark.parametrize("slot", [1, "yes", None])
def test_slot_is_a_bool(memory_harness: Harness, slot: object) -> None:
    sem = memory_harness.connect().semaphore("b", capacity=1)
    with pytest.raises(TypeError):
        sem.acquire(slot=slot)  # type: ignore[arg-type]


@networked
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

    real = driver.take_slot

    def losing(waiter: Waiter, index: int, deadline: Deadline) -> Program[object]:
        lose_its_reply()
        return (yield from real(waiter, index, deadline))

    monkeypatch.setattr(driver, "take_slot", losing)
    permit = sem.acquire(slot=True, timeout=30)
    restored.join()
    assert indices(permit) == [0]
    assert "adopted it" in caplog.text  # the create landed; its reply did not
    assert len(slot_records(service, "lost-slot")) == 1  # adopted: no second record
    assert sem.status().holders[0].slots == (0,)
    permit.release()
    wait_until(lambda: service.entries() == [])


# (memory: test_leaving_while_taking_slots_leaves_no_record_and_no_entry interrupts
# each of its steps instead)
@_stores("zookeeper", "etcd", "redis")
def test_interrupts_at_any_point_of_a_slot_acquire_leave_nothing_behind(
    service: Harness,
) -> None:
    """KeyboardInterrupt (asyncio: the task cancelled) at random moments of acquires
    with slots: in the create, the listing, the slot listing, a slot create whose reply
    is still on its way. Every interrupted acquire removes its entry and its records."""
    sem = service.connect().semaphore("irq-slots", capacity=3)
    holder = sem.acquire(slot=True)
    interrupted, granted = interrupt_acquires(
        lambda: sem.acquire(permits=2, timeout=5, slot=True), seed=11, wanted=20
    )
    assert all(indices(p) == [1, 2] for p in granted)
    assert interrupted >= 20  # the interrupts really landed inside acquire
    # only the holder's entry and its record
    wait_until(lambda: len(service.entries("irq-slots")) == 2, timeout=10)
    assert sem.status().holders[0].slots == (0,)
    holder.release()
    wait_until(lambda: service.entries() == [])
