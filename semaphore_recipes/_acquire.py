"""One ``acquire``, as a program both faces run (the sync ``Semaphore`` and ``aio``).

The protocol generator (``_core.protocol``) decides; this program adds what is the
same for both faces around it: the waiter's registration, the permit made at admission,
the held mark, and the cleanup on every way out without a permit. It yields the store
requests (:class:`StoreRequest`) that a face answers, blocking or awaited; whatever the
face's answer raises (a timeout, KeyboardInterrupt, the task's cancellation) is thrown
in at the ``yield``, so the cleanup below runs for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ._core.deadline import ONE_REPLY_FLOOR, Deadline, one_reply_deadline
from ._core.protocol import Enqueue, MarkHeld, Step, acquire_protocol
from ._core.queue import Entry
from ._core.slots import ListSlots, Slot, TakeSlot
from .backend import Backend, QueueDriver, Waiter
from .errors import AcquireTimeout, BackendUnavailable, SlotsNotSupported
from .instrumentation import AcquireOutcome, Instrumentation, outcome_of, report

log = logging.getLogger("semaphore_recipes")


class HeldPermit(Protocol):
    """What this program needs of a face's permit."""

    key: str
    token: int
    slots: tuple[Slot, ...]

    def _entry_lost(self, why: str) -> None: ...

    def _abandoned(self) -> None: ...

    def _observe(self, instrumentation: Instrumentation) -> None: ...


P = TypeVar("P", bound=HeldPermit)


@dataclass(frozen=True)
class StoreRequest:
    """Answer ``step`` (Enqueue, Arm, Relist, AwaitEvent, ListSlots or TakeSlot) within
    ``deadline``.
    ``first_try``: a request bounded by the request timeout rather than the caller's
    deadline (the first enqueue, and the slot steps of an admitted entry); its
    AcquireTimeout is the face's to turn into BackendUnavailable
    (:func:`first_try_failed`)."""

    step: Step
    deadline: Deadline
    first_try: bool = False


@dataclass(frozen=True)
class Abandon:
    """Remove the waiter's entry (found by its id if the create's reply is still to
    come) and wait for the store to confirm it, at most ``_leave.CONFIRM_WAIT`` (then it
    goes on in the background: the caller has its answer at its deadline). Answer:
    None."""


ABANDON = Abandon()


def acquisition(
    store: QueueDriver,
    waiter: Waiter,
    deadline: Deadline,
    *,
    blocking: bool,
    watch_entry: bool,
    slots: bool = False,
    new_permit: Callable[[Entry, Waiter], P],
    abandon: Callable[[Waiter], None],
    clock: Callable[[], float],
) -> Generator[StoreRequest | Abandon, object, P]:
    """The program of one acquire: returns the permit (its held mark handed to the store)."""
    name = store.name
    permit: P | None = None
    mark: MarkHeld | None = None
    instrumentation = store.backend.instrumentation
    started = clock()
    outcome = AcquireOutcome.ERROR
    report(instrumentation.acquire_started, name, waiter.weight)
    store.register(waiter)
    try:
        protocol = acquire_protocol(name, waiter.weight, deadline, blocking=blocking, slots=slots)
        step = next(protocol)
        while True:
            answer: object = None
            if isinstance(step, MarkHeld):
                permit = new_permit(step.me, waiter)
                permit.slots = step.slots
                mark = step
            elif isinstance(step, Enqueue):
                if waiter.entry_id is not None:
                    log.warning("session lost while waiting for %r: entering the queue again", name)
                    abandon(waiter)
                answer = yield _one_reply_request(step, step.first, store, deadline, clock)
            elif isinstance(step, (ListSlots, TakeSlot)):
                # admitted: a deadline that passed (timeout=0) still gets the slots' replies
                answer = yield _one_reply_request(step, True, store, deadline, clock)
            else:
                answer = yield StoreRequest(step, deadline)
            try:
                step = protocol.send(answer)
            except StopIteration:
                break
        assert permit is not None and mark is not None
        log.debug("acquired %d of %r (token %d)", waiter.weight, name, permit.token)
        if watch_entry:
            store.watch_entry(permit.key, permit.token, permit._entry_lost)
        # Last: a backend may hand the mark to a thread of its own, which would
        # then compete with this one for the GIL until acquire returns.
        store.mark_held(waiter, mark.me, mark.now, mark.lower, permit._entry_lost, mark.view)
        outcome = AcquireOutcome.GRANTED
    except BaseException as exc:
        outcome = outcome_of(exc)
        if permit is not None:  # interrupted between admission and return
            permit._abandoned()  # the abandon below deletes its entry
        if isinstance(exc, GeneratorExit):
            abandon(waiter)  # the program is being closed: nothing can be awaited now
        else:
            yield ABANDON  # the face waits for the delete, as a release would
        raise
    finally:
        store.unregister(waiter)
        report(instrumentation.acquire_ended, name, waiter.weight, outcome, clock() - started)
    permit._observe(instrumentation)
    return permit


def _one_reply_request(
    step: Step, awaited: bool, store: QueueDriver, deadline: Deadline, clock: Callable[[], float]
) -> StoreRequest:
    """A step whose reply is ``awaited`` (the first try of an acquire; the slot steps
    of an admitted entry) is given at least ``one_reply_deadline``'s time, whatever the
    caller's timeout: ``timeout=0`` needs one reply to decide."""
    floor = one_reply_deadline(deadline, store.request_timeout, clock) if awaited else None
    if floor is None:
        return StoreRequest(step, deadline)
    return StoreRequest(step, floor, first_try=True)


def validate_slot(slot: object, backend: Backend) -> None:
    """``acquire(slot=...)``: a bool, and True only where the store keeps slots
    (before any I/O)."""
    if not isinstance(slot, bool):
        raise TypeError(f"slot is a bool, not {type(slot).__name__}")
    if slot and not backend.capabilities.slots:
        raise SlotsNotSupported(backend.scheme)


def first_try_failed(store: QueueDriver, exc: AcquireTimeout) -> BackendUnavailable:
    """A first enqueue that ran out of its one-reply time, not of the caller's deadline."""
    error = BackendUnavailable(
        f"semaphore {store.name!r}: no answer within "
        f"{min(store.request_timeout, ONE_REPLY_FLOOR):g} s"
    )
    error.__cause__ = exc
    return error
