"""Ctrl-C at each step of an acquire, one step at a time (deterministic, where the
contract suite's timer cannot aim inside an acquire that takes microseconds)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.backend import Program, Waiter
from semaphore_recipes.memory import MemoryStore
from semaphore_recipes.memory.queue import MemoryQueue

#: The store calls of an acquire's steps (enqueue, arm, relist, held mark). The calls of
#: its cleanup are not interrupted: one Ctrl-C per acquire, as in the contract suite.
STEP_CALLS = ("new_entry_key", "create_entries", "watch_entries", "entries", "mark_held")


@contextmanager
def interrupt_at(
    call: int, after: bool, on_armed: Callable[[], None] = lambda: None
) -> Iterator[list[int]]:
    """KeyboardInterrupt just before (or just after) the ``call``-th step call of the
    main thread; ``on_armed`` runs after each of its watch reads. Yields the count of
    step calls seen."""
    seen = [0]
    main = threading.main_thread()
    originals = {name: getattr(MemoryStore, name) for name in STEP_CALLS}

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not main:
                return real(self, *args, **kwargs)
            seen[0] += 1
            mine = seen[0] == call
            if mine and not after:
                raise KeyboardInterrupt
            result = real(self, *args, **kwargs)
            if name == "watch_entries":
                on_armed()
            if mine:
                raise KeyboardInterrupt
            return result

        return step

    for name, real in originals.items():
        setattr(MemoryStore, name, wrap(name, real))
    try:
        yield seen
    finally:
        for name, real in originals.items():
            setattr(MemoryStore, name, real)


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize(
    "scenario",
    [
        "free",  # granted at once
        "full",  # waits, times out
        "wait",  # waits, the holder leaves, granted (and marks itself held)
    ],
)
def test_an_interrupt_at_any_step_of_an_acquire_leaves_nothing_behind(
    memory_backend: Callable[..., sr.Client], scenario: str, after: bool
) -> None:
    backend, other = memory_backend(), memory_backend()
    capacity = 2 if scenario == "free" else 1
    sem = backend.semaphore("irq", capacity=capacity)
    holder_sem = other.semaphore("irq", capacity=capacity)
    store = backend.store
    interrupted = 0
    call = 0
    while True:
        call += 1
        holder = holder_sem.acquire()

        def armed(holder: sr.Permit = holder) -> None:
            if scenario == "wait":
                holder.release()  # the holder leaves once we wait behind it

        permit = None
        with interrupt_at(call, after, armed) as seen:
            try:
                permit = sem.acquire(timeout=0.05 if scenario == "full" else 5)
            except KeyboardInterrupt:
                interrupted += 1
            except sr.AcquireTimeout:
                assert scenario == "full"
        # the holder's entry while it holds, the permit's if granted: nothing else
        expected = (holder.state is sr.PermitState.HELD) + (permit is not None)
        assert len(store.entry_paths()) == expected, (call, store.entry_paths())
        if permit is not None:
            assert permit.state is sr.PermitState.HELD
            permit.release()
        holder.release()
        assert store.entry_paths() == []
        if seen[0] < call:  # this acquire made fewer step calls: each one was tried
            break
    assert interrupted == call - 1 >= 2


def test_a_second_ctrl_c_during_the_cleanup_still_removes_the_entry(
    memory_backend: Callable[..., sr.Client],
) -> None:
    """Ctrl-C ends a waiting acquire; a second one arrives as its cleanup begins (a user
    pressing twice). It ends the caller's wait for the removal, not the removal: the
    entry is still deleted (on the removal's own thread, ``_leave``)."""
    assert threading.current_thread() is threading.main_thread()
    backend, other = memory_backend(), memory_backend()
    sem = backend.semaphore("twice", capacity=1)
    holder = other.semaphore("twice", capacity=1).acquire()
    real_abandon = MemoryQueue.abandon
    abandons: list[int] = []
    main = threading.main_thread().ident
    assert main is not None

    def abandon(
        self: MemoryQueue, waiter: Waiter, slot_records: Mapping[int, int | None]
    ) -> Program[None]:
        if not abandons:
            abandons.append(1)
            signal.pthread_kill(main, signal.SIGINT)  # the second Ctrl-C
            time.sleep(0.05)  # (it lands while the main thread waits for this removal)
        yield from real_abandon(self, waiter, slot_records)

    first_ctrl_c = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
    MemoryQueue.abandon = abandon  # type: ignore[method-assign]
    try:
        first_ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            sem.acquire(timeout=30)
        left = ["(not read)"]
        deadline = time.monotonic() + 5
        while left and time.monotonic() < deadline:
            time.sleep(0.01)
            left = [e for e in backend.store.entry_paths() if not e.endswith(holder.key)]
    finally:
        first_ctrl_c.cancel()
        MemoryQueue.abandon = real_abandon  # type: ignore[method-assign]
    assert abandons == [1]
    assert left == [], "the interrupted cleanup left the entry behind"
    holder.release()


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("scenario", ["free", "full", "wait"])
def test_an_interrupt_at_any_step_of_an_acquire_all_leaves_nothing_in_any_queue(
    memory_backend: Callable[..., sr.Client], scenario: str, after: bool
) -> None:
    """The same for ``acquire_all`` over two semaphores, one of them held by another
    backend: every entry of the request goes, in every queue."""
    backend, other = memory_backend(), memory_backend()
    capacity = 2 if scenario == "free" else 1
    backend.semaphore("irq-a", capacity=capacity)
    holder_sem = other.semaphore("irq-b", capacity=capacity)
    store = backend.store
    interrupted = 0
    call = 0
    while True:
        call += 1
        holder = holder_sem.acquire()

        def armed(holder: sr.Permit = holder) -> None:
            if scenario == "wait":
                holder.release()

        permit = None
        with interrupt_at(call, after, armed) as seen:
            try:
                timeout = 0.05 if scenario == "full" else 5
                permit = backend.acquire_all({"irq-a": 1, "irq-b": 1}, timeout=timeout)
            except KeyboardInterrupt:
                interrupted += 1
            except sr.AcquireTimeout:
                assert scenario == "full"
        expected = (holder.state is sr.PermitState.HELD) + 2 * (permit is not None)
        assert len(store.entry_paths()) == expected, (call, store.entry_paths())
        if permit is not None:
            assert permit.state is sr.PermitState.HELD
            permit.release()
        holder.release()
        assert store.entry_paths() == []
        if seen[0] < call:
            break
    assert interrupted == call - 1 >= 2
