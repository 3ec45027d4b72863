"""The seam tells the instrumentation of every re-list sent to the store
(``Instrumentation.queue_listed``), and of none answered from what the process knows."""

from __future__ import annotations

import time
from collections.abc import Sequence

from semaphore_recipes._core.protocol import Relist
from semaphore_recipes.backend import Deadline, Entry, Program, SessionLost, Waiter, run_program
from semaphore_recipes.instrumentation import Instrumentation

from .fakes import FakeQueue, Hub

LOWER = [Entry("a", 1, 1)]


class Listed(Instrumentation):
    def __init__(self) -> None:
        self.names: list[str] = []

    def queue_listed(self, name: str) -> None:
        self.names.append(name)


class ListingQueue(FakeQueue):
    """A store that lists, or answers from what it knows when ``known`` is set."""

    known: list[Entry] | None = None
    listings = 0

    def known_lower(self, waiter: Waiter) -> Sequence[Entry] | None:
        return self.known

    def relist(self, waiter: Waiter, deadline: Deadline) -> Program[Sequence[Entry] | SessionLost]:
        yield from ()
        self.listings += 1
        return LOWER


def relisted(queue: ListingQueue) -> object:
    waiter = Waiter(1, "owner")
    deadline = Deadline(5.0, time.monotonic)
    return run_program(queue.step(waiter, Relist(), deadline), lambda request: None)


def test_a_relist_sent_to_the_store_is_told_and_one_answered_from_memory_is_not() -> None:
    hub = Hub()
    listed = Listed()
    hub.instrument(listed)
    queue = ListingQueue("q", hub)
    assert relisted(queue) == LOWER
    assert listed.names == ["q"] and queue.listings == 1
    queue.known = [Entry("b", 2, 1)]
    assert relisted(queue) == queue.known
    assert listed.names == ["q"] and queue.listings == 1  # no request, nothing told
