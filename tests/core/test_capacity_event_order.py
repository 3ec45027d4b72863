"""A waiter never admits itself on a capacity older than one it already knows.

Found by the fault campaign twice in one soak (issue 12): etcd storm seed 722 (rev 4999,
weights 5 under capacity 3) and ZooKeeper storm seed 823 (zxid 0xe000004e8, weights 6
under capacity 5). A driver posts every capacity it applies to the waiters' current
generation; a waiter that is enqueuing keeps what was posted meanwhile, and its enqueue
answers with the newest capacity. Then it folded the inbox one event at a time and
decided after each: a stale ``CapacityChanged(6)`` admitted it before the newer 3 was
read. A second ordering did the same: a driver applies a capacity under its lock but
posts it after, so an older post can land after a newer one. Events now carry the
capacity's store version and a waiter ignores one older than what it knows.

Driven through the real face (``Semaphore.acquire``), ``QueueDriver.apply_capacity`` and
``Waiter``; only the store's I/O is faked, in the shape of the etcd enqueue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from semaphore_recipes import AcquireTimeout
from semaphore_recipes.backend import (
    Deadline,
    Enqueued,
    Entry,
    EntryData,
    EntryState,
    Program,
    SessionLost,
    Waiter,
)
from semaphore_recipes.backend import driver as seam
from semaphore_recipes.semaphore import Semaphore

from .fakes import FakeQueue, Hub

HOLDER = Entry(key="4dbda206f4cab014-2", order=4990, weight=3)  # c0.22/t2's permit
MY_KEY, MY_TOKEN = "4dbda206f4cab014-0", 4992  # c0.22/t0's entry


class HookedLog:
    """Stands in for the seam's log: runs ``hook`` at the first info() call, i.e. between
    ``apply_capacity``'s unlock and its posts."""

    def __init__(self, hook: Callable[[], None]) -> None:
        self.hook: Callable[[], None] | None = hook

    def info(self, *args: Any) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class BurstStore(FakeQueue):
    """The etcd enqueue, with the capacity watch's burst landing during its round trip."""

    def __init__(self, hub: Hub, burst: Callable[[BurstStore], None]) -> None:
        super().__init__("chaos", hub)
        self.capacity, self._capacity_version = 4, 4934  # what c0.22 had applied
        self.burst = burst
        self.marked: list[str] = []

    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        yield from ()
        waiter.new_generation()
        waiter.creating(MY_KEY)
        self.burst(self)  # the capacity watch's thread, while the txn is on its way
        # the txn's answer: config at rev 4985 (capacity 3), slot 2 listed below us
        self.apply_capacity(3, 4985)
        waiter.created(MY_KEY, MY_TOKEN)
        capacity, version = self.capacity_answer()
        me = Entry(MY_KEY, MY_TOKEN, waiter.weight)
        return Enqueued(me, (HOLDER,), capacity, later_entries=True, capacity_version=version)

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        yield from ()
        return {k: EntryState(held=False) for k in keys}  # slot 2: live, unmarked

    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        self.marked.append(key)

    def relist(self, waiter: Waiter, deadline: Deadline) -> Program[list[Entry] | SessionLost]:
        yield from ()
        return [HOLDER]


def in_order(store: BurstStore) -> None:
    store.apply_capacity(6, 4971)
    store.apply_capacity(3, 4985)


def overtaken(store: BurstStore) -> None:
    # the older update's posts land after the newer update's (run from its log line)
    hooked = HookedLog(lambda: store.apply_capacity(3, 4985))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(seam, "log", hooked)
        store.apply_capacity(6, 4971)
    store.apply_capacity(3, 4985)  # the watch's own 4985 event: nothing changes


@pytest.mark.parametrize("burst", [in_order, overtaken])
def test_a_capacity_superseded_before_the_enqueue_never_admits(
    burst: Callable[[BurstStore], None],
) -> None:
    hub = Hub()
    store = BurstStore(hub, burst)
    sem = Semaphore(store, hub, "c0.22", clock=time.monotonic)
    try:
        permit = sem.acquire(2, timeout=0.3)
    except AcquireTimeout:
        permit = None
    assert store.capacity_answer() == (3, 4985)
    assert permit is None and not store.marked, (
        f"admitted with weights {HOLDER.weight + 2} at or below our entry while the "
        f"capacity is {store.capacity} (a stale CapacityChanged(6) was applied)"
    )
