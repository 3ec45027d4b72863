"""An admission the backend cannot vouch for is confirmed before the permit is given.

The memory store's session has no clock to run out, so these tests make the backend
doubt it (``session_vouched`` False) and script ``confirm``'s answers: a False one is
an entry whose session ended while the admission was on its way (a pause, or a store
that stalled). The waiter must then leave that entry and enter the queue again; the
real case, a process paused past its session, is the shipped contract's
``test_a_waiter_admitted_while_paused_past_its_session_queues_again``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

import semaphore_recipes as sr
import semaphore_recipes.aio
from semaphore_recipes.backend import Deadline, Program, Waiter
from semaphore_recipes.memory.backend import MemoryBackend
from semaphore_recipes.memory.queue import MemoryQueue


@dataclass
class Doubts:
    vouched: bool = False  # what session_vouched answers
    answers: list[bool] = field(default_factory=list)  # confirm's, then the store's own
    confirmed: list[str | None] = field(default_factory=list)  # the keys confirm was asked


@pytest.fixture
def doubts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Doubts]:
    found = Doubts()
    store_confirm = MemoryQueue.confirm

    def confirm(self: MemoryQueue, waiter: Waiter, deadline: Deadline) -> Program[bool]:
        found.confirmed.append(waiter.key)
        if found.answers and not found.answers.pop(0):
            return False
        return (yield from store_confirm(self, waiter, deadline))

    monkeypatch.setattr(MemoryBackend, "session_vouched", lambda self, contact: found.vouched)
    monkeypatch.setattr(MemoryQueue, "confirm", confirm)
    yield found


def url() -> str:
    return f"memory://confirm-{uuid.uuid4().hex[:8]}"


def test_a_vouched_session_is_not_confirmed(doubts: Doubts) -> None:
    doubts.vouched = True
    with sr.connect(url()) as backend:
        backend.semaphore("s", capacity=1).acquire(timeout=5).release()
    assert doubts.confirmed == []


def test_a_confirmed_admission_holds_its_first_entry(doubts: Doubts) -> None:
    with sr.connect(url()) as backend:
        sem = backend.semaphore("s", capacity=1)
        permit = sem.acquire(timeout=5)
        assert doubts.confirmed == [permit.key]
        assert permit.state is sr.PermitState.HELD
        assert [h.key for h in sem.status().holders] == [permit.key]
        permit.release()


def test_an_admission_not_confirmed_enters_the_queue_again(doubts: Doubts) -> None:
    doubts.answers = [False]
    with sr.connect(url()) as backend:
        sem = backend.semaphore("s", capacity=1)
        permit = sem.acquire(timeout=5)
        first, second = doubts.confirmed
        assert first != second == permit.key  # a new entry, confirmed in its turn
        status = sem.status()  # the first entry is gone: no permit is held twice
        assert [h.key for h in status.holders] == [permit.key] and not status.waiters
        permit.release()
        assert not sem.status().holders


def test_acquire_all_not_confirmed_enters_every_queue_again(doubts: Doubts) -> None:
    doubts.answers = [True, False]  # the second semaphore's entry is gone
    with sr.connect(url()) as backend:
        a = backend.semaphore("a", capacity=2)
        b = backend.semaphore("b", capacity=1)
        permit = backend.acquire_all({"a": 2, "b": 1}, timeout=5)
        assert len(doubts.confirmed) == 4  # both entries twice: the second time all hold
        for sem in (a, b):
            assert len(sem.status().holders) == 1 and not sem.status().waiters
        permit.release()
        assert not a.status().holders and not b.status().holders


def test_the_asyncio_face_enters_the_queue_again(doubts: Doubts) -> None:
    doubts.answers = [False]

    async def main() -> None:
        backend = await sr.aio.connect(url())
        try:
            sem = backend.semaphore("s", capacity=1)
            permit = await sem.acquire(timeout=5)
            assert len(doubts.confirmed) == 2 and doubts.confirmed[1] == permit.key
            status = await sem.status()
            assert [h.key for h in status.holders] == [permit.key]
            await permit.release()
        finally:
            await backend.close()

    asyncio.run(main())


@pytest.mark.parametrize("multi", [False, True], ids=["acquire", "acquire_all"])
def test_an_interrupted_confirmation_leaves_no_entry(
    doubts: Doubts, monkeypatch: pytest.MonkeyPatch, multi: bool
) -> None:
    def interrupted(self: MemoryQueue, waiter: Waiter, deadline: Deadline) -> Program[bool]:
        doubts.confirmed.append(waiter.key)
        yield from ()
        raise KeyboardInterrupt  # (Ctrl-C, or a timeout: the same way out)

    monkeypatch.setattr(MemoryQueue, "confirm", interrupted)
    with sr.connect(url()) as backend:
        sem = backend.semaphore("s", capacity=1)
        with pytest.raises(KeyboardInterrupt):
            if multi:
                backend.acquire_all({"s": 1}, timeout=5)
            else:
                sem.acquire(timeout=5)
        assert doubts.confirmed  # (interrupted there)
        status = sem.status()
        assert not status.holders and not status.waiters
