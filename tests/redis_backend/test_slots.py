"""Job slots on Redis: given by the script that admits the entry, so taking them costs
no round trip after the admission (the contract suite's slot tests run on Redis too)."""

from __future__ import annotations

import threading
from typing import Any

from semaphore_recipes.backend import Slot, StoreAdmitted, Waiter
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
        waiting = EntryView(40, False, 2, 1, False, True, None, (), ())
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
