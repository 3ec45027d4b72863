"""The sync face's own logic (no server behaviour is claimed here)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import pytest

from semaphore_recipes import PermitState
from semaphore_recipes.backend import (
    Deadline,
    Enqueued,
    Entry,
    EntryData,
    Program,
    Waiter,
    session_lost,
)
from semaphore_recipes.semaphore import Semaphore

from .fakes import FakeQueue, Hub


class OneShotStore(FakeQueue):
    """Admits at once; the session ends just after the store answered the enqueue,
    before the permit exists (the window the face must close)."""

    def __init__(self, hub: Hub) -> None:
        super().__init__("face", hub)
        self.capacity = 1

    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        yield from ()
        waiter.new_generation()
        waiter.creating("id")
        waiter.created("k", 7)
        self.backend.publish(session_lost("session expired"))  # no permit is listening yet
        self.backend.requeue_waiters()  # ...and the waiter is told, as the backends do
        return Enqueued(Entry("k", 1, 1), (), 1, later_entries=False, capacity_version=1)


def test_a_session_that_ends_as_the_permit_is_granted_leaves_it_lost() -> None:
    hub = Hub()
    sem = Semaphore(OneShotStore(hub), hub, "owner", clock=time.monotonic)
    permit = sem.acquire()
    assert permit.state is PermitState.LOST and permit.lost.is_set()


class InterruptedAfterAdmission(OneShotStore):
    """Admits at once; Ctrl-C lands in the work done after the admission (the held
    mark, or the watch on the permit's own entry)."""

    def __init__(self, hub: Hub, where: str) -> None:
        super().__init__(hub)
        self.where = where
        self.abandoned: list[str | None] = []

    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        yield from ()
        waiter.new_generation()
        waiter.creating("id")
        waiter.created("k", 7)
        # a later entry exists: the held mark is written at once (MarkHeld.now)
        return Enqueued(Entry("k", 1, 1), (), 1, later_entries=True, capacity_version=1)

    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None:
        if self.where == "mark":
            raise KeyboardInterrupt

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None:
        if self.where == "watch":
            raise KeyboardInterrupt

    def abandon(self, waiter: Waiter, slot_records: Mapping[int, int | None]) -> Program[None]:
        yield from ()
        self.abandoned.append(waiter.key)


@pytest.mark.parametrize("where", ["mark", "watch"])
def test_an_interrupt_after_the_admission_removes_the_entry(where: str) -> None:
    hub = Hub()
    store = InterruptedAfterAdmission(hub, where)
    sem = Semaphore(store, hub, "owner", clock=time.monotonic)
    with pytest.raises(KeyboardInterrupt):
        sem.acquire(watch_entry=True)
    assert store.abandoned == ["k"]  # the driver's cleanup ran: no entry is left held
    assert not hub._permit_listeners  # and no half-made permit listens to the session


class CountingRemoves(InterruptedAfterAdmission):
    """Admits at once and counts the deletes the face asks for."""

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub, where="nowhere")
        self.removed: list[str] = []

    def remove(self, key: str, slot_records: Mapping[int, int | None]) -> Program[None]:
        yield from ()
        self.removed.append(key)


@pytest.mark.parametrize("lost_first", [True, False])
def test_release_deletes_the_entry_once_even_when_the_permit_is_lost(lost_first: bool) -> None:
    # The client's own verdict (a whole session timeout disconnected) may be wrong: the
    # server can keep the session, and with it the entry, which must not outlive release.
    hub = Hub()
    store = CountingRemoves(hub)
    permit = Semaphore(store, hub, "owner", clock=time.monotonic).acquire()
    if lost_first:
        hub.publish(session_lost("disconnected for the whole session timeout"))
    permit.release()
    permit.release()
    if not lost_first:
        hub.publish(session_lost("session expired"))  # after release: changes nothing
    assert store.removed == ["k"]
    expected = PermitState.LOST if lost_first else PermitState.RELEASED
    assert permit.state is expected
    assert permit.lost.is_set() is lost_first
