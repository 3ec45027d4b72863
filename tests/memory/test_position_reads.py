"""What position reports cost: no read of the queue for an acquire that does not ask,
one per interval for one that does, and none in the last request timeout before its
deadline (so the deadline holds when the store stops answering)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import semaphore_recipes as sr
from semaphore_recipes.memory.queue import MemoryQueue

Connect = Callable[..., sr.Client]


@pytest.fixture
def status_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names whose status a queue driver read, in order."""
    reads: list[str] = []
    original = MemoryQueue.status

    def counted(self: MemoryQueue) -> object:
        reads.append(self.name)
        return original(self)

    monkeypatch.setattr(MemoryQueue, "status", counted)
    return reads


def test_an_acquire_that_does_not_ask_reads_nothing(
    memory_backend: Connect, status_reads: list[str]
) -> None:
    sem = memory_backend().semaphore("quiet", capacity=1)
    with sem.acquire(), pytest.raises(sr.AcquireTimeout):
        sem.acquire(timeout=0.5)
    assert status_reads == []


def test_one_read_per_interval_and_none_near_the_deadline(
    memory_backend: Connect, memory_url: str, status_reads: list[str]
) -> None:
    backend = memory_backend(url=f"{memory_url}?request_timeout=0.5")
    sem = backend.semaphore("asks", capacity=1)
    reports: list[sr.Position] = []
    with sem.acquire(), pytest.raises(sr.AcquireTimeout):
        sem.acquire(timeout=1.5, on_position=reports.append, position_interval=0.2)
    # reads at 0, 0.2, ... up to 1.0 s: the last 0.5 s (the request timeout) has none
    assert 4 <= len(status_reads) <= 6, status_reads
    assert len(reports) == len(status_reads)
    assert all(r.entries_ahead == 0 and r.holders == 1 for r in reports)
    assert max(r.waited for r in reports) <= 1.0 + 0.1
