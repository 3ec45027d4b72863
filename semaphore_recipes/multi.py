"""Several semaphores at once: ``client.acquire_all({...})`` and its :class:`MultiPermit`.

The request's entries, one per semaphore, are created in one atomic store request and
deleted in one (``Backend.enqueue_all`` / ``Backend.delete_all``); the protocol
(``_core.multi``) waits in every queue as a single acquire does, and grants once every
queue admitted it. Two such requests are ordered alike in every queue, so they never
deadlock, whatever the order of the names (docs/design.md section 2, "Several
semaphores at once").

What happens on trouble is what happens to one ``acquire`` (see ``semaphore.py``): the
entries share the session, so a session that ends while waiting makes the request enter
every queue again at the back (logged at WARNING); one that ends while holding makes the
multi-permit LOST. On every way out without a permit (timeout, WouldBlock, exception,
KeyboardInterrupt) every entry is removed, in one request.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from ._acquire import Leave, StoreCall, answer_blocking, confirm_admission
from ._core.deadline import Deadline, one_reply_deadline, validate_timeout
from ._core.multi import EnqueueAll, EnqueuedAll, InQueue, QueueEvent, multi_acquire_protocol
from ._core.names import validate_name, validate_permits
from ._core.program import Program, run_program
from ._core.protocol import AwaitEvent, BackendFailed, Enqueued, Event, MarkHeld, SessionLost
from ._core.queue import Entry
from ._inbox import Inbox
from ._leave import leave
from ._permit import LostEvent, PermitBase, PermitState
from .backend import Capability, FencedTransaction, QueueDriver, Waiter
from .semaphore import Semaphore

if TYPE_CHECKING:
    from .backend import Backend

log = logging.getLogger("semaphore_recipes")

#: What ``acquire_all`` takes: permits by semaphore (an object, or an existing one's name).
Wanted = Mapping[str, int] | Mapping[Semaphore, int] | Mapping[str | Semaphore, int]

__all__ = ["MultiPermit", "PermitState", "acquire_all"]


class AcquireAllInbox:
    """The events of every queue of one multi-acquire, in the order they came.
    ``ring``: called after each post (the asyncio face wakes its parked task with it)."""

    def __init__(self, ring: Callable[[], None] | None = None) -> None:
        self._events: Inbox[tuple[QueueWaiter, int, Event]] = Inbox()
        self._ring = ring

    def put(self, waiter: QueueWaiter, generation: int, event: Event) -> None:
        self._events.put((waiter, generation, event))
        if self._ring is not None:
            self._ring()

    def next_event(self, timeout: float | None) -> Event | QueueEvent | None:
        """The next event of a queue's current generation, tagged with the queue (the
        end of the session and the backend's failure concern them all), or None when
        ``timeout`` passes (0: what is there now)."""
        end = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                left = None if end is None else max(0.0, end - time.monotonic())
                if left == 0.0:
                    waiter, generation, event = self._events.get_nowait()
                else:
                    waiter, generation, event = self._events.get(timeout=left)
                if generation != waiter.generation:
                    continue  # armed for an entry that died with an earlier session
                if isinstance(event, (SessionLost, BackendFailed)):
                    return event
                return QueueEvent(waiter.semaphore, event)
        except queue.Empty:
            return None

    def session_ended(self) -> bool:
        """Drain the inbox: did the session end after the last event the protocol saw?"""
        ended = False
        while True:
            try:
                waiter, generation, event = self._events.get_nowait()
            except queue.Empty:
                return ended
            ended |= generation == waiter.generation and isinstance(event, SessionLost)


class QueueWaiter(Waiter):
    """A multi-acquire's waiter in the queue of ``semaphore``: what the driver posts to
    it goes to the request's one inbox."""

    def __init__(self, weight: int, owner: str, semaphore: str, inbox: AcquireAllInbox) -> None:
        super().__init__(weight, owner)
        self.semaphore = semaphore
        self._shared = inbox

    def deliver(self, generation: int, event: Event) -> None:
        self._shared.put(self, generation, event)


Pairs = list[tuple[QueueDriver, QueueWaiter]]


def requested(
    weights: Mapping[Any, int], name_of: Callable[[object], str | None]
) -> dict[str, tuple[object, int]]:
    """``acquire_all``'s mapping checked before any I/O, for either face: {name: (what
    was given, permits)}. ``name_of``: the name of a semaphore object of the face, None
    for anything else (then it must be a valid name)."""
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError("acquire_all takes a non-empty mapping {semaphore: permits}")
    named: dict[str, tuple[object, int]] = {}
    for what, permits in weights.items():
        name = name_of(what)
        if name is None:
            name = validate_name(what)
        if name in named:
            raise ValueError(f"semaphore {name!r} is asked twice")
        if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
            raise ValueError(f"permits of {name!r} must be an int >= 1, not {permits!r}")
        named[name] = (what, permits)
    return named


def check_supported(backend: Backend, names: Sequence[str], *, aio: bool = False) -> None:
    """NotSupported unless ``backend`` has ``acquire_all``'s hooks (of the face) and
    takes semaphores ``names`` in one request (``Backend.check_together``)."""
    needed = (Capability.ACQUIRE_ALL, Capability.ASYNC_FACE) if aio else (Capability.ACQUIRE_ALL,)
    backend.capabilities.require(backend.scheme, *needed)
    backend.check_together(names)


# ---- the program both faces run --------------------------------------------------------


P = TypeVar("P", bound=PermitBase)


def multi_acquisition(
    backend: Backend,
    drivers: Mapping[str, QueueDriver],
    weights: Mapping[str, int],
    inbox: AcquireAllInbox,
    deadline: Deadline,
    *,
    blocking: bool,
    new_permit: Callable[[Pairs, Mapping[str, Entry]], P],
    abandon_nowait: Callable[[Pairs], None],
    clock: Callable[[], float],
) -> Generator[StoreCall | Leave | AwaitEvent, object, P]:
    """One ``acquire_all`` as a program (``_core.program``): yields the store requests
    a face answers as for one acquire (``_acquire.answer_blocking``/``answer_awaited``;
    an AwaitEvent with ``inbox``'s next event), blocking or awaited; returns the
    permit. On any way out without a permit every entry is removed, in one request
    (``abandon_nowait``, not awaited, when the program is closed)."""
    names = sorted(weights)
    waiters = {n: QueueWaiter(weights[n], backend.owner, n, inbox) for n in names}
    pairs: Pairs = [(drivers[n], waiters[n]) for n in names]
    marks_lost: list[str] = []
    # a store whose writes decide admission marked the entries held itself
    server_admission = backend.capabilities.server_admission
    for driver, waiter in pairs:
        driver.register(waiter)
    contact = time.monotonic()  # when the last store call answered was sent
    try:
        while True:
            protocol = multi_acquire_protocol(
                weights, deadline, blocking=blocking, server_admission=server_admission
            )
            step = next(protocol)
            while True:
                answer: object = None
                sent = time.monotonic()
                if isinstance(step, EnqueueAll):
                    if any(w.key is not None or w.entry_id is not None for w in waiters.values()):
                        log.warning("session lost while waiting for %s: entering again", names)
                        yield Leave(backend.delete_entries(pairs), describe_pairs(pairs))
                        sent = time.monotonic()
                    answer = yield _enqueue_all_call(backend, pairs, deadline, step.first, clock)
                    contact = sent
                elif isinstance(step, InQueue):
                    driver, waiter = drivers[step.name], waiters[step.name]
                    inner = step.step
                    if isinstance(inner, MarkHeld):
                        if not server_admission:
                            driver.mark_held(
                                waiter, inner.me, inner.now, inner.lower, marks_lost.append
                            )
                    else:
                        answer = yield StoreCall(driver.step(waiter, inner, deadline))
                        contact = sent
                else:
                    answer = yield step
                try:
                    step = protocol.send(answer)
                except StopIteration as stop:
                    entries: dict[str, Entry] = stop.value
                    break
            confirmed = True
            for driver, waiter in pairs:
                confirmed = yield from confirm_admission(driver, waiter, contact, deadline, clock)
                if not confirmed:
                    break
            if confirmed:
                break
            log.warning("%s: admitted, but the session ended meanwhile (a pause, or a store "
                        "that stalled): entering again", names)  # fmt: skip
            marks_lost.clear()
    except BaseException as exc:
        if isinstance(exc, GeneratorExit):
            abandon_nowait(pairs)  # the program is being closed: nothing can be awaited now
        else:
            yield Leave(backend.delete_entries(pairs), describe_pairs(pairs))  # all, in one request
        raise
    finally:
        for driver, waiter in pairs:
            driver.unregister(waiter)
    permit = new_permit(pairs, entries)
    permit._follow_session(backend, inbox.session_ended)
    if marks_lost:  # (a permit lost with its session stays so)
        permit._entry_lost(marks_lost[0])
    log.debug("acquired %s (token %d)", dict(weights), permit.token)
    return permit


def _enqueue_all_call(
    backend: Backend, pairs: Pairs, deadline: Deadline, first: bool, clock: Callable[[], float]
) -> StoreCall:
    """The first try is given at least ``one_reply_deadline``'s time, as for one acquire."""
    floor = one_reply_deadline(deadline, backend.request_timeout, clock) if first else None
    if floor is None:
        return StoreCall(_enqueued_all(pairs, backend.enqueue_all(pairs, deadline)))
    what = f"semaphores {sorted(w.semaphore for _, w in pairs)}"
    return StoreCall(
        _enqueued_all(pairs, backend.enqueue_all(pairs, floor)), first_try=True, what=what
    )


def _enqueued_all(pairs: Pairs, enqueue_all: Program[dict[str, Enqueued]]) -> Program[EnqueuedAll]:
    """The protocol's answer to EnqueueAll, each queue's saying whether it drains."""
    answers = yield from enqueue_all
    drivers = {driver.name: driver for driver, _ in pairs}
    return EnqueuedAll({name: drivers[name].with_draining(e) for name, e in answers.items()})


# ---- the sync face ---------------------------------------------------------------------


def _semaphore_name(what: object) -> str | None:
    return what.name if isinstance(what, Semaphore) else None


def acquire_all(
    backend: Backend,
    existing: Callable[[str], Semaphore],
    weights: Wanted,
    *,
    timeout: float | None = None,
    blocking: bool = True,
) -> MultiPermit:
    """Take ``weights[s]`` permits of every semaphore ``s`` at once, in FIFO order in
    each queue, with no deadlock whatever the order of the names.

    ``s`` is a :class:`Semaphore` (opened with its capacity rules) or the name of an
    existing semaphore (SemaphoreNotFound otherwise). Bad names, weights or timeouts
    raise before any I/O (a weight above a capacity once the semaphore is opened).
    ``timeout``, ``blocking``, the first try's bound and the errors are those of
    ``Semaphore.acquire``; NotSupported before any I/O on a backend without the
    capability (``Backend.capabilities.acquire_all``). The request is granted once every queue
    admitted it (a queue that admits it first counts it as a holder while it waits
    in the others). ``existing``: the client's semaphore opened by name, kept.
    """
    validate_timeout(timeout)
    named = requested(weights, _semaphore_name)
    check_supported(backend, list(named))
    drivers: dict[str, QueueDriver] = {}
    for name, (what, permits) in named.items():
        semaphore = what if isinstance(what, Semaphore) else existing(name)
        validate_permits(permits, semaphore.capacity)
        drivers[name] = semaphore._store
    inbox = AcquireAllInbox()
    program = multi_acquisition(
        backend,
        drivers,
        {name: permits for name, (_, permits) in named.items()},
        inbox,
        Deadline(timeout if blocking else 0.0, time.monotonic),
        blocking=blocking,
        new_permit=lambda pairs, entries: MultiPermit(backend, pairs, entries),
        abandon_nowait=lambda pairs: _leave_all(backend, pairs),
        clock=time.monotonic,
    )

    def answer(request: object) -> object:
        if isinstance(request, AwaitEvent):
            return inbox.next_event(request.timeout)
        assert isinstance(request, (StoreCall, Leave))
        return answer_blocking(request, backend)

    return run_program(program, answer)


def _leave_all(backend: Backend, pairs: Pairs) -> None:
    """Remove every entry of ``pairs``, waiting for it as ``_leave.leave`` does."""
    removal = backend.delete_entries(pairs)
    leave(
        lambda: backend.run(removal),
        describe_pairs(pairs),
        backend.request_timeout,
        backend.instrumentation,
    )


def describe_pairs(pairs: Pairs) -> str:
    """The semaphores of ``pairs``, for messages."""
    return ",".join(sorted(w.semaphore for _, w in pairs))


class _Names:
    def __init__(self, name: str) -> None:
        self.name = name


class MultiPermitBase(PermitBase):
    """What both faces' multi-permits are: ``weights``, ``keys`` and ``tokens`` by
    semaphore, ``token`` (one atomic create gives every entry the same one)."""

    def __init__(self, backend: Backend, pairs: Pairs, entries: Mapping[str, Entry]) -> None:
        tokens = {w.semaphore: w.token for _, w in pairs}
        assert all(t is not None for t in tokens.values())
        token = max(t for t in tokens.values() if t is not None)
        self.weights = {name: entry.weight for name, entry in entries.items()}
        self.keys = {name: entry.key for name, entry in entries.items()}
        self.tokens: dict[str, int] = {n: t for n, t in tokens.items() if t is not None}
        described = "+".join(sorted(entries))
        summary = Entry(" ".join(self.keys.values()), token, sum(self.weights.values()))
        super().__init__(_Names(described), summary, token, backend.owner)
        self._backend = backend
        self._pairs = pairs

    def _fenced(self) -> FencedTransaction:
        """The backend's transaction fenced on every entry (``transaction()``)."""
        entries = [(driver, self.keys[waiter.semaphore]) for driver, waiter in self._pairs]
        return self._backend.transaction_all(entries, self.token)


class MultiPermit(MultiPermitBase, LostEvent):
    """Permits held in several semaphores at once. Release with :meth:`release` or a
    ``with`` block: every entry goes in one request.

    ``tokens``: each semaphore's fencing token (its entry's creation revision; one
    atomic create gives them all the same one, ``token``). ``lost`` is set when the
    session ends or an entry is deleted: one entry lost is the whole permit lost.
    """

    def __init__(self, backend: Backend, pairs: Pairs, entries: Mapping[str, Entry]) -> None:
        super().__init__(backend, pairs, entries)

    def transaction(self) -> FencedTransaction:
        """A transaction that commits only while *every* entry of this permit is held
        (same writes and errors as ``Permit.transaction``)."""
        return self._fenced()

    def release(self) -> None:
        """Give every permit back, in one request. Idempotent; never raises; returns
        within the request timeout (the rest goes on in the background)."""
        if self._begin_release():
            self._backend.run(self._backend.delete_entries(self._pairs))
            log.debug("released %s (token %d)", self.weights, self.token)

    def __enter__(self) -> MultiPermit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
