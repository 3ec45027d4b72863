"""Job slots on Redis: given by the script that admits the entry, so taking them costs
no round trip after the admission (the contract suite's slot tests run on Redis too)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from semaphore_recipes._core.protocol import BackendFailed
from semaphore_recipes.backend import Slot, StoreAdmitted, Waiter
from semaphore_recipes.errors import BackendUnavailable
from semaphore_recipes.redis.queue import EntryView, RedisQueue
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.redis_harness import RedisHarness


def _scripts_run(admin: Any) -> int:
    stats = admin.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def _indices(permit: Any) -> list[int]:
    return [slot.index for slot in permit.slots]


def test_an_uncontended_acquire_with_slots_is_one_script(
    redis_harness: RedisHarness, redis_admin: Any
) -> None:
    # (a long session: no lease renewal runs a script meanwhile)
    sem = redis_harness.connect(session_timeout=60).semaphore("one-trip", capacity=3)
    sem.acquire().release()  # opened, scripts loaded
    before = _scripts_run(redis_admin)
    plain = sem.acquire()
    assert _scripts_run(redis_admin) - before == 1
    plain.release()
    before = _scripts_run(redis_admin)
    permit = sem.acquire(permits=2, slot=True)
    assert _scripts_run(redis_admin) - before == 1  # the enqueue's, slots and all
    assert _indices(permit) == [0, 1]
    permit.release()


def test_a_waiter_admitted_by_a_release_gets_its_slots_with_its_message(
    redis_harness: RedisHarness, redis_admin: Any
) -> None:
    holder = redis_harness.connect(session_timeout=60).semaphore("told", capacity=3)
    sem = redis_harness.connect(session_timeout=60).semaphore("told", capacity=3)
    first = holder.acquire(permits=2, slot=True)  # 0, 1
    second = holder.acquire(slot=True)  # 2
    granted: list[Any] = []
    waiter = threading.Thread(
        target=lambda: granted.append(sem.acquire(permits=2, slot=True, timeout=30)),
        daemon=True,
    )
    waiter.start()
    wait_until(lambda: len(sem.status().waiters) == 1)
    before = _scripts_run(redis_admin)
    first.release()
    waiter.join(30)
    # the release's script only: the waiter's admission and slots came in its message
    assert _scripts_run(redis_admin) - before == 1
    assert [_indices(p) for p in granted] == [[0, 1]]
    assert [h.slots for h in sem.status().holders] == [(2,), (0, 1)]
    tokens = [s.token for s in granted[0].slots]
    assert tokens[0] > second.slots[0].token  # new records: new tokens
    second.release()
    granted[0].release()
    wait_until(lambda: redis_harness.entries() == [])


def test_an_admission_message_that_overtook_the_enqueue_reply_brings_the_slots(
    redis_harness: RedisHarness,
) -> None:
    """The admission message may be handled before the reply of the enqueue (whose
    script left the entry waiting): the enqueue's answer carries the message's slots."""
    sem = redis_harness.connect().semaphore("overtaken", capacity=2)
    queue = sem._store
    assert isinstance(queue, RedisQueue)
    waiter = Waiter(2, "owner")
    waiter.wants_slots = True
    queue.register(waiter)
    try:
        queue.creating(waiter, "e.1")
        given = (Slot(0, 41), Slot(1, 42))
        queue.admitted("e.1", 2, 1, given)  # the message, handled first
        waiter.created("e.1", 40)
        waiting = EntryView(40, False, 2, 1, False, None, ())
        enqueued = queue.enqueued(waiter, "e.1", waiting)
        assert enqueued.admitted and enqueued.slots == given
        event = waiter.next_event(0)
        assert event == StoreAdmitted("e.1", given)
        plain = Waiter(1, "owner")  # an acquire without slot=True is told none
        queue.register(plain)
        queue.creating(plain, "e.2")
        queue.admitted("e.2", 2, 1, ())
        assert plain.next_event(0) == StoreAdmitted("e.2", None)
        queue.unregister(plain)
    finally:
        queue.unregister(waiter)


def test_slots_stay_distinct_under_churn_when_a_paused_holders_lease_expires(
    redis_harness: RedisHarness,
) -> None:
    """A holder of slots 0 and 1 in another process is paused (SIGSTOP) past its
    lease while threads of two backends cycle weights 1-2 with slots on capacity 3. No
    script runs at the expiry: a waiter's timed look finds the lease gone, and the
    sweep drops the dead holder before it gives anyone an index, so its slots are given
    again, never before the lease could have expired, and the live holders' slots stay
    distinct throughout."""
    url = redis_harness.url_with(session_timeout=1)
    script = (
        "import sys, time, semaphore_recipes as sr\n"
        "sem = sr.connect(sys.argv[1]).semaphore('paused', capacity=3)\n"
        "p = sem.acquire(permits=2, slot=True)\n"
        "print('HELD', *[s.index for s in p.slots], flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["HELD", "0", "1"]
        sems = [redis_harness.connect().semaphore("paused", capacity=3) for _ in range(2)]
        proc.send_signal(signal.SIGSTOP)
        paused = time.monotonic()
        held: set[int] = set()
        first_grant: dict[int, float] = {}  # index -> when it was first granted here
        errors: list[str] = []
        lock = threading.Lock()
        stop = paused + 3.0

        def cycle(which: int, seed: int) -> None:
            rng = random.Random(seed)
            while time.monotonic() < stop and not errors:
                permit = sems[which].acquire(permits=rng.randint(1, 2), timeout=20, slot=True)
                mine = set(_indices(permit))
                with lock:
                    if max(mine) >= 3 or len(mine) != permit.permits or mine & held:
                        errors.append(f"granted {sorted(mine)} while {sorted(held)} held here")
                    held.update(mine)
                    for index in mine:
                        first_grant.setdefault(index, time.monotonic())
                time.sleep(rng.uniform(0, 0.01))
                with lock:
                    held.difference_update(mine)
                permit.release()

        threads = [threading.Thread(target=cycle, args=(i % 2, i), daemon=True) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        # the paused holder's slots: given again, once its lease (renewed every third of
        # the 1 s session timeout) could have run out, and not before
        assert {0, 1} <= first_grant.keys(), first_grant
        assert min(first_grant[0], first_grant[1]) - paused > 0.6
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)
    wait_until(lambda: redis_harness.entries() == [])


def test_an_admission_without_the_slots_asked_for_is_no_grant(
    redis_harness: RedisHarness,
) -> None:
    """A script that gives no slots (a client of an older version sharing the prefix)
    admitted an entry that asked for them: BackendUnavailable, not a permit without
    its slots, whether the reply or the message says it."""
    sem = redis_harness.connect().semaphore("no-slots-given", capacity=2)
    queue = sem._store
    assert isinstance(queue, RedisQueue)
    waiter = Waiter(2, "owner")
    waiter.wants_slots = True
    queue.register(waiter)
    try:
        queue.creating(waiter, "e.1")
        waiter.created("e.1", 40)
        held = EntryView(40, True, 2, 1, False, None, (Slot(0, 41),))
        with pytest.raises(BackendUnavailable, match="1 of the 2 job slot"):
            queue.enqueued(waiter, "e.1", held)
        queue.creating(waiter, "e.2")
        queue.admitted("e.2", 2, 1, ())
        event = waiter.next_event(0)
        assert isinstance(event, BackendFailed) and "0 of the 2 job slot" in event.reason
    finally:
        queue.unregister(waiter)
