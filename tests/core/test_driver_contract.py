"""The seam's duties are checked, not only written down: a queue driver that forgets
one fails at its first acquire (or when its class is made), in any single-process test."""

from __future__ import annotations

import time
import uuid

import pytest

import semaphore_recipes as sr
from semaphore_recipes._core.protocol import Arm
from semaphore_recipes._url import parse_url
from semaphore_recipes.backend import (
    Capabilities,
    Deadline,
    DriverContractError,
    Enqueued,
    EntryDeleted,
    EntryState,
    Program,
    QueueDriver,
    Waiter,
)
from semaphore_recipes.memory.backend import MemoryBackend
from semaphore_recipes.memory.queue import MemoryQueue


def _client(backend_class: type[MemoryBackend]) -> sr.Client:
    return sr.Client(backend_class.from_url(parse_url(f"memory://dc{uuid.uuid4().hex[:8]}")))


class _ForgetsCreated(MemoryQueue):
    """An enqueue that never tells the waiter what it created."""

    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        enqueued = yield from super().enqueue(waiter, deadline)
        waiter.key = waiter.token = None  # as if created() had never been called
        return enqueued


class _ForgetsCreatedBackend(MemoryBackend):
    queue_type = _ForgetsCreated

    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[MemoryQueue]:
        queue = _ForgetsCreated(self, name)
        return queue.open(capacity, adopt_capacity=adopt_capacity, create=create)


def test_an_enqueue_that_does_not_record_its_entry_fails_the_acquire() -> None:
    with _client(_ForgetsCreatedBackend) as client:
        sem = client.semaphore("forgets", capacity=1)
        with pytest.raises(DriverContractError, match=r"waiter\.created"):
            sem.acquire(timeout=1)


def test_a_deletion_is_posted_with_its_view_or_not_at_all() -> None:
    """A bare EntryDeleted would drop the view the driver kept of an entry admitted
    here: the waiter refuses it (and mypy does, from its type)."""
    waiter = Waiter(1, "owner")
    with pytest.raises(TypeError, match="entry_deleted"):
        waiter.post(0, EntryDeleted("k"))  # type: ignore[arg-type]


def test_an_arm_answering_none_gets_the_view_kept_for_an_entry_admitted_here() -> None:
    """The base, not each driver, turns 'gone' into the entry's admitted view."""
    with _client(MemoryBackend) as client:
        sem = client.semaphore("views", capacity=1)
        holder = sem.acquire()
        holder.release()  # the view it was admitted with (empty) stays with the driver
        arming = sem._store.step(
            Waiter(1, "owner"), Arm((holder.key,)), Deadline(None, time.monotonic)
        )
        states = client.backend.run(arming)
        assert isinstance(states, dict)
        assert states[holder.key] == EntryState(held=True, left_view=())


def test_a_class_declaring_client_admission_without_its_hooks_is_refused() -> None:
    class _NoArm(MemoryQueue):
        arm = QueueDriver.arm  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"_NoArm\.arm"):

        class _Backend(MemoryBackend):
            queue_type = _NoArm

    class _ServerDecides(MemoryBackend):  # the same queue, declared server-decided: fine
        queue_type = _NoArm
        capabilities = Capabilities(async_face=True, slots=True, server_admission=True)

    assert _ServerDecides.capabilities.server_admission


def test_a_store_deciding_slots_at_admission_needs_no_slot_hooks() -> None:
    """``admission_slots``: the admission answers carry the slots, so the queue class
    defines no ``list_slots``/``take_slot``; without it they are required, and the
    flag means nothing without slots decided on the server."""

    class _NoSlotSteps(MemoryQueue):
        list_slots = QueueDriver.list_slots  # type: ignore[assignment]
        take_slot = QueueDriver.take_slot

    class _AtAdmission(MemoryBackend):
        queue_type = _NoSlotSteps
        capabilities = Capabilities(
            async_face=True, slots=True, server_admission=True, admission_slots=True
        )

    assert _AtAdmission.capabilities.admission_slots
    with pytest.raises(TypeError, match=r"_NoSlotSteps\.list_slots"):

        class _Taken(MemoryBackend):
            queue_type = _NoSlotSteps
            capabilities = Capabilities(async_face=True, slots=True, server_admission=True)

    with pytest.raises(TypeError, match="admission_slots needs"):
        Capabilities(slots=True, admission_slots=True)


def test_a_slot_step_asked_of_a_store_deciding_slots_at_admission_is_its_bug() -> None:
    """A store declaring ``admission_slots`` whose admission of a ``slot=True`` acquire
    came without them: the protocol's fallback slot step reaches the base's hooks, which
    name the driver's bug (not SlotsNotSupported)."""

    class _Forgets(MemoryBackend):
        capabilities = Capabilities(
            async_face=True, slots=True, server_admission=True, admission_slots=True
        )

    with _client(_Forgets) as client:
        sem = client.semaphore("forgets-slots", capacity=1)
        driver = sem._store
        assert driver is not None
        deadline = Deadline(None, time.monotonic)
        with pytest.raises(DriverContractError, match="admission_slots"):
            QueueDriver.list_slots(driver, Waiter(1, "o"), deadline)
        with pytest.raises(DriverContractError, match="admission_slots"):
            QueueDriver.take_slot(driver, Waiter(1, "o"), 0, deadline)
