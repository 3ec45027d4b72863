"""etcd entry keys are reused per lease (``<lease>-<slot>``), so deleted keys do not pile
up under ``entries/`` between compactions; a reused key is a different entry."""

from __future__ import annotations

import time
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes._core.codec import EntryData
from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.protocol import Arm
from semaphore_recipes.backend import Waiter
from semaphore_recipes.etcd.slots import EntrySlots
from semaphore_recipes.testing.etcd_harness import EtcdHarness

from ..conftest import wait_until, waiter_thread


def test_one_client_cycling_reuses_one_key(
    ed: EtcdHarness, etcd_admin: Any, sr_namespace: str
) -> None:
    backend = ed.connect()
    sem = backend.semaphore("cycle", capacity=3)
    keys, tokens = set(), []
    for _ in range(20):
        permit = sem.acquire()
        keys.add(permit.key)
        tokens.append(permit.token)
        permit.release()
    assert keys == {f"{backend.lease_id:x}-0"}
    assert tokens == sorted(set(tokens))  # every cycle is a new entry: a new fencing token
    # concurrent permits of one backend get distinct keys, across Semaphore objects of
    # one name too, and a freed slot serves again
    other = backend.semaphore("cycle", capacity=3)
    a, b, c = sem.acquire(), other.acquire(), sem.acquire()
    assert len({a.key, b.key, c.key}) == 3
    assert len(ed.entries()) == 3
    b.release()
    d = other.acquire()
    assert d.key == b.key and d.token > b.token
    for p in (a, c, d):
        p.release()
    assert ed.entries() == []


def test_a_reused_key_is_not_taken_for_the_entry_it_replaced(ed: EtcdHarness) -> None:
    """A waiter lists holder K; K is released and its key reused by a newer entry that
    queues behind the waiter. Reading K must say "gone", or the two would wait for each
    other (the waiter for the new K, the new K for the waiter)."""
    holder_backend = ed.connect()
    holder_sem = holder_backend.semaphore("reuse", capacity=1)
    first = holder_sem.acquire()
    queue = ed.connect().semaphore("reuse", capacity=1)._store
    run = queue.backend.run
    waiter = Waiter(1, "test-waiter")
    queue.register(waiter)
    deadline = Deadline(30.0, time.monotonic)
    try:
        enqueued = run(queue.enqueue(waiter, deadline))
        assert [e.key for e in enqueued.lower] == [first.key]
        first.release()
        t, out = waiter_thread(holder_sem)  # its new entry takes the freed key, behind us
        wait_until(lambda: [w.key for w in holder_sem.status().waiters] == [first.key])
        assert run(queue.step(waiter, Arm((first.key,)), deadline)) == {first.key: None}
    finally:
        run(queue.abandon_entry(waiter))
        queue.unregister(waiter)
    t.join(10)
    assert out and out[0][1].key == first.key and out[0][1].token > first.token
    out[0][1].release()


@pytest.mark.parametrize(
    ("uid", "weight"),
    [("1-0", 0), ("1-0", -5), ("../x", 1), ("zz", 1), ("1-0/x", 1), ("1-00", 1)],
)
def test_a_planted_entry_is_corrupt_state_for_status_and_acquire(
    ed: EtcdHarness, etcd_admin: Any, sr_namespace: str, uid: str, weight: int
) -> None:
    """One decoder, one verdict: an entry the library would never write (weight < 1,
    a key that is not ``<lease hex>-<slot>``) is CorruptState for ``status()`` and
    ``acquire()`` alike, and the acquire leaves nothing of its own behind."""
    sem = ed.connect().semaphore("planted", capacity=2)
    key = f"{sr_namespace}/planted/entries/{uid}".encode()
    value = EntryData(owner="planted", held=False, since=0.0, weight=weight).encode()
    etcd_admin.put(key, value)
    try:
        with pytest.raises(sr.CorruptState):
            sem.status()
        with pytest.raises(sr.CorruptState):
            sem.acquire(timeout=5)
        assert ed.entries() == [key.decode()]
    finally:
        etcd_admin.delete_range(key)
    sem.acquire(timeout=5).release()


def test_entry_slots_reuse_the_lowest_freed_slot_of_the_current_lease() -> None:
    slots = EntrySlots()
    assert [slots.take(7) for _ in range(4)] == [0, 1, 2, 3]
    slots.free(7, 2)
    slots.free(7, 0)
    slots.free(7, 0)  # freed twice (a delete retried): still one slot
    slots.free(6, 1)  # another lease's entry: not ours to free
    assert [slots.take(7) for _ in range(4)] == [0, 2, 4, 5]
    assert slots.take(8) == 0  # a new lease: the old lease's entries are gone with it
    slots.free(7, 1)  # a late delete of the old lease's entry
    assert slots.take(8) == 1
