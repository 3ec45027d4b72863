"""One ``acquire``, as a program both faces run (the sync ``Semaphore`` and ``aio``).

The protocol generator (``_core.protocol``) decides; this program adds what is the
same for both faces around it: the waiter's registration, the permit made at admission,
the held mark, and the cleanup on every way out without a permit. It yields the store
requests (:class:`StoreCall`, :class:`Leave`: store programs, and AwaitEvent) that a
face answers, blocking or awaited (:func:`answer_blocking`, :func:`answer_awaited`); whatever the
face's answer raises (a timeout, KeyboardInterrupt, the task's cancellation) is thrown
in at the ``yield``, so the cleanup below runs for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ._core.deadline import ONE_REPLY_FLOOR, Deadline, one_reply_deadline
from ._core.program import Program
from ._core.protocol import AwaitEvent, Enqueue, MarkHeld, Step, acquire_protocol
from ._core.queue import Entry
from ._core.slots import ListSlots, Slot, TakeSlot
from ._core.status import Status
from ._leave import leave, leave_async
from ._position import DEFAULT_POSITION_INTERVAL, PositionCallback, PositionReports
from .backend import Backend, QueueDriver, Waiter
from .errors import AcquireTimeout, BackendUnavailable, SemaphoreError, SlotsNotSupported
from .instrumentation import AcquireOutcome, Instrumentation, outcome_of, report

log = logging.getLogger("semaphore_recipes")


class HeldPermit(Protocol):
    """What this program needs of a face's permit."""

    key: str
    token: int
    slots: tuple[Slot, ...]

    def _entry_lost(self, why: str) -> None: ...

    def _revoke_requested(self) -> None: ...

    def _abandoned(self) -> None: ...

    def _observe(self, instrumentation: Instrumentation) -> None: ...


P = TypeVar("P", bound=HeldPermit)


@dataclass(frozen=True)
class StoreCall:
    """Run ``program``, a store step (``backend.runner``), on the face's runner.
    ``first_try``: a step bounded by the one-reply floor rather than the caller's
    deadline (the first enqueue, and the slot steps of an admitted entry), for which an
    AcquireTimeout means the store did not answer: the face raises
    BackendUnavailable naming ``what`` (:func:`answer_blocking`)."""

    program: Program[object]
    first_try: bool = False
    what: str = ""


@dataclass(frozen=True)
class Leave:
    """Run the removal ``program`` and wait for it at most ``_leave.CONFIRM_WAIT``
    (then it goes on in the background: the caller has its answer at its deadline).
    Answer: None."""

    program: Program[None]
    what: str


def acquisition(
    store: QueueDriver,
    waiter: Waiter,
    deadline: Deadline,
    *,
    blocking: bool,
    watch_entry: bool,
    slots: bool = False,
    new_permit: Callable[[Entry, Waiter], P],
    abandon_nowait: Callable[[Waiter], None],
    clock: Callable[[], float],
    on_position: PositionCallback | None = None,
    position_interval: float = DEFAULT_POSITION_INTERVAL,
) -> Generator[StoreCall | Leave | AwaitEvent, object, P]:
    """The program of one acquire: returns the permit (its held mark handed to the store).
    ``on_position``: told where the waiter stands while it waits (:mod:`._position`)."""
    name = store.name
    permit: P | None = None
    mark: MarkHeld | None = None
    instrumentation = store.backend.instrumentation
    started = clock()
    reports = (
        None
        if on_position is None
        else PositionReports(on_position, position_interval, store.request_timeout, clock, started)
    )
    outcome = AcquireOutcome.ERROR
    report(instrumentation.acquire_started, name, waiter.weight)
    # a store whose writes decide admission marked the entry held itself
    server_admission = store.backend.capabilities.server_admission
    waiter.wants_slots = slots
    store.register(waiter)
    contact = time.monotonic()  # when the last store call answered was sent (confirm_admission)
    try:
        while True:
            protocol = acquire_protocol(
                name,
                waiter.weight,
                deadline,
                blocking=blocking,
                slots=slots,
                server_admission=server_admission,
                peek_first=store.backend.capabilities.peek_before_arming,
            )
            step = next(protocol)
            while True:
                answer: object = None
                sent = time.monotonic()  # (the store's clock: confirm_admission)
                if isinstance(step, MarkHeld):
                    permit = new_permit(step.me, waiter)
                    permit.slots = step.slots
                    mark = step
                elif isinstance(step, Enqueue):
                    if waiter.entry_id is not None:
                        log.warning("session lost while waiting for %r: entering the queue again",
                                    name)  # fmt: skip
                        yield Leave(store.abandon_entry(waiter), name)
                        sent = time.monotonic()  # (the store's clock: confirm_admission)
                    answer = yield _one_reply_call(step, step.first, store, waiter, deadline, clock)
                    contact = sent
                elif isinstance(step, (ListSlots, TakeSlot)):
                    # admitted: a deadline that passed (timeout=0) still gets the slots' replies
                    answer = yield _one_reply_call(step, True, store, waiter, deadline, clock)
                    contact = sent
                elif isinstance(step, AwaitEvent):
                    if reports is not None and waiter.token is not None:
                        if reports.due(deadline):
                            reports.read((yield from _status_read(store)), waiter.token)
                        step = AwaitEvent(reports.wait_for(step.timeout, deadline))
                    answer = yield step  # the face waits for the waiter's next event
                else:
                    answer = yield StoreCall(store.step(waiter, step, deadline))
                    contact = sent
                try:
                    step = protocol.send(answer)
                except StopIteration:
                    break
            assert permit is not None and mark is not None
            if (yield from confirm_admission(store, waiter, contact, deadline, clock)):
                break
            log.warning("semaphore %r: admitted, but the session ended meanwhile (a pause, or "
                        "a store that stalled): entering the queue again", name)  # fmt: skip
            permit._abandoned()  # (the next Enqueue deletes its entry)
            permit = mark = None
        log.debug("acquired %d of %r (token %d)", waiter.weight, name, permit.token)
        if watch_entry:
            if store.backend.capabilities.revoke:  # told through the same watch
                store.watch_revocation(permit.key, permit.token, permit._revoke_requested)
            store.watch_entry(permit.key, permit.token, permit._entry_lost)
        # Last: a backend may hand the mark to a thread of its own, which would
        # then compete with this one for the GIL until acquire returns.
        if not server_admission:
            store.mark_held(waiter, mark.me, mark.now, mark.lower, permit._entry_lost, mark.view)
        outcome = AcquireOutcome.GRANTED
    except BaseException as exc:
        outcome = outcome_of(exc)
        if permit is not None:  # interrupted between admission and return
            permit._abandoned()  # the abandon below deletes its entry
        if isinstance(exc, GeneratorExit):
            abandon_nowait(waiter)  # the program is being closed: nothing can be awaited now
        else:
            yield Leave(store.abandon_entry(waiter), name)  # waited for, as a release would be
        raise
    finally:
        store.unregister(waiter)
        waited = clock() - started
        report(instrumentation.acquire_ended, name, waiter.weight, outcome, waited)
    report(instrumentation.acquire_granted, name, waiter.weight, permit.token, waited)
    permit._observe(instrumentation)
    return permit


def confirm_admission(
    store: QueueDriver,
    waiter: Waiter,
    contact: float,
    deadline: Deadline,
    clock: Callable[[], float],
) -> Generator[StoreCall, object, bool]:
    """May the admitted ``waiter`` hold? Its admission may have been told (or decided,
    from events) after its session ended: the process paused, or the store stalled with
    its clock running on, past the session timeout. Where the store cannot vouch for
    the session from a call sent at ``contact`` (the last one answered) or from its own
    renewals, one round trip confirms the entry is still ours."""
    if store.backend.session_vouched(contact):
        return True
    floor = one_reply_deadline(deadline, store.request_timeout, clock)
    what = f"semaphore {store.name!r}"
    if floor is None:
        confirmed = yield StoreCall(store.confirm(waiter, deadline))
    else:  # (a deadline that passed still gets the reply: the entry was admitted)
        confirmed = yield StoreCall(store.confirm(waiter, floor), first_try=True, what=what)
    return confirmed is True


def _status_read(store: QueueDriver) -> Generator[StoreCall, object, Status | None]:
    """The queue's status for a position report; None when it cannot be read (the
    wait goes on: a report is no reason to fail the acquire)."""
    try:
        status = yield StoreCall(store.status())
    except SemaphoreError as exc:
        log.debug("semaphore %r: no position read: %s", store.name, exc)
        return None
    assert isinstance(status, Status)
    return status


def _one_reply_call(
    step: Step,
    awaited: bool,
    store: QueueDriver,
    waiter: Waiter,
    deadline: Deadline,
    clock: Callable[[], float],
) -> StoreCall:
    """A step whose reply is ``awaited`` (the first try of an acquire; the slot steps
    of an admitted entry) is given at least ``one_reply_deadline``'s time, whatever the
    caller's timeout: ``timeout=0`` needs one reply to decide."""
    floor = one_reply_deadline(deadline, store.request_timeout, clock) if awaited else None
    if floor is None:
        return StoreCall(store.step(waiter, step, deadline))
    what = f"semaphore {store.name!r}"
    return StoreCall(store.step(waiter, step, floor), first_try=True, what=what)


def validate_slot(slot: object, backend: Backend) -> None:
    """``acquire(slot=...)``: a bool, and True only where the store keeps slots
    (before any I/O)."""
    if not isinstance(slot, bool):
        raise TypeError(f"slot is a bool, not {type(slot).__name__}")
    if slot and not backend.capabilities.slots:
        raise SlotsNotSupported(backend.scheme)


def answer_blocking(request: StoreCall | Leave, backend: Backend) -> object:
    """The sync face's answer to a store request of an acquire program (both shapes)."""
    if isinstance(request, Leave):
        removal = request.program
        leave(
            lambda: backend.run(removal),
            request.what,
            backend.request_timeout,
            backend.instrumentation,
        )
        return None
    try:
        return backend.run(request.program)
    except AcquireTimeout as exc:
        if request.first_try:
            raise _no_reply(request.what, backend.request_timeout) from exc
        raise


async def answer_awaited(request: StoreCall | Leave, backend: Backend) -> object:
    """:func:`answer_blocking` for the asyncio face: a removal is not shielded beyond
    ``_leave.CONFIRM_WAIT``, and goes on when the awaiting task is cancelled."""
    if isinstance(request, Leave):
        removal = backend.run_async(request.program)
        await leave_async(removal, request.what, backend.request_timeout, backend.instrumentation)
        return None
    try:
        return await backend.run_async(request.program)
    except AcquireTimeout as exc:
        if request.first_try:
            raise _no_reply(request.what, backend.request_timeout) from exc
        raise


def _no_reply(what: str, request_timeout: float) -> BackendUnavailable:
    """A first try that ran out of its one-reply time, not of the caller's deadline."""
    return BackendUnavailable(
        f"{what}: no answer within {min(request_timeout, ONE_REPLY_FLOOR):g} s"
    )
