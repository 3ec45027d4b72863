"""Several semaphores at once: ``backend.acquire_all({...})`` and its :class:`MultiPermit`.

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
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from ._core.deadline import Deadline, validate_timeout
from ._core.multi import EnqueueAll, EnqueuedAll, InQueue, QueueEvent, multi_acquire_protocol
from ._core.names import validate_name, validate_permits
from ._core.protocol import Arm, AwaitEvent, BackendFailed, Event, MarkHeld, Relist, SessionLost
from ._core.queue import Entry
from ._permit import PermitBase, PermitState
from .backend import MULTI, FencedTransaction, QueueDriver, Waiter, session_lost
from .errors import AcquireTimeout, BackendUnavailable, NotSupported

if TYPE_CHECKING:
    from .backend import Backend
    from .semaphore import Semaphore

log = logging.getLogger("semaphore_recipes")

#: What ``acquire_all`` takes: permits by semaphore (an object, or an existing one's name).
Wanted = Mapping[str, int] | Mapping["Semaphore", int] | Mapping["str | Semaphore", int]

__all__ = ["MultiPermit", "PermitState", "acquire_all"]


class _Inbox:
    """The events of every queue of one multi-acquire, in the order they came."""

    def __init__(self) -> None:
        self._events: queue.SimpleQueue[tuple[QueueWaiter, int, Event]] = queue.SimpleQueue()

    def put(self, waiter: QueueWaiter, generation: int, event: Event) -> None:
        self._events.put((waiter, generation, event))

    def next_event(self, timeout: float | None) -> Event | QueueEvent | None:
        """The next event of a queue's current generation, tagged with the queue (the
        end of the session and the backend's failure concern them all), or None when
        ``timeout`` passes."""
        try:
            while True:
                waiter, generation, event = self._events.get(timeout=timeout)
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

    def __init__(self, weight: int, owner: str, semaphore: str, inbox: _Inbox) -> None:
        super().__init__(weight, owner)
        self.semaphore = semaphore
        self._shared = inbox

    def post(self, generation: int, event: Event) -> None:
        self._shared.put(self, generation, event)


class _Requested:
    """The semaphore a name stands for: the object given, or the existing one."""

    def __init__(self, backend: Backend, weights: Wanted) -> None:
        from .semaphore import Semaphore

        if not isinstance(weights, Mapping) or not weights:
            raise ValueError("acquire_all takes a non-empty mapping {semaphore: permits}")
        named: dict[str, tuple[str | Semaphore, int]] = {}
        for what, permits in weights.items():
            name = what.name if isinstance(what, Semaphore) else validate_name(what)
            if name in named:
                raise ValueError(f"semaphore {name!r} is asked twice")
            if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
                raise ValueError(f"permits of {name!r} must be an int >= 1, not {permits!r}")
            named[name] = (what, permits)
        self.weights = {name: permits for name, (_, permits) in named.items()}
        self.drivers: dict[str, QueueDriver] = {}
        for name, (what, permits) in named.items():
            semaphore = what if isinstance(what, Semaphore) else None
            if semaphore is None:
                semaphore = backend.existing_semaphore(name)
            validate_permits(permits, semaphore.capacity)
            self.drivers[name] = semaphore._store


def acquire_all(
    backend: Backend,
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
    hooks (``Backend.supports_acquire_all``). The request is granted once every queue admitted it (a
    queue that admits it first counts it as a holder while it waits in the others).
    """
    validate_timeout(timeout)
    if not backend.supports_acquire_all:
        raise NotSupported(backend.scheme, MULTI)
    requested = _Requested(backend, weights)
    names = sorted(requested.weights)
    deadline = Deadline(timeout if blocking else 0.0, time.monotonic)
    inbox = _Inbox()
    waiters = {n: QueueWaiter(requested.weights[n], backend.owner, n, inbox) for n in names}
    pairs = [(requested.drivers[n], waiters[n]) for n in names]
    marks_lost: list[str] = []
    for driver, waiter in pairs:
        driver.register(waiter)
    protocol = multi_acquire_protocol(requested.weights, deadline, blocking=blocking)
    try:
        step = next(protocol)
        while True:
            answer: object = None
            if isinstance(step, EnqueueAll):
                if any(w.key is not None or w.entry_id is not None for w in waiters.values()):
                    log.warning("session lost while waiting for %s: entering again", names)
                    backend.delete_all(pairs)
                answer = _enqueue_all(backend, pairs, deadline, first=step.first)
            elif isinstance(step, InQueue):
                driver, waiter = requested.drivers[step.name], waiters[step.name]
                inner = step.step
                if isinstance(inner, Arm):
                    answer = driver.arm(waiter, inner.keys, deadline)
                elif isinstance(inner, Relist):
                    answer = driver.relist(waiter, deadline)
                else:
                    assert isinstance(inner, MarkHeld)
                    driver.mark_held(waiter, inner.me, inner.now, inner.lower, marks_lost.append)
            else:
                assert isinstance(step, AwaitEvent)
                answer = inbox.next_event(step.timeout)
            try:
                step = protocol.send(answer)
            except StopIteration as stop:
                entries: dict[str, Entry] = stop.value
                break
    except BaseException:
        backend.delete_all(pairs)  # every entry, in one request
        raise
    finally:
        for driver, waiter in pairs:
            driver.unregister(waiter)
    permit = MultiPermit(backend, pairs, entries)
    if inbox.session_ended():
        permit._session_changed(session_lost("the session ended as the permits were granted"))
    elif marks_lost:
        permit._entry_lost(marks_lost[0])
    log.debug("acquired %s (token %d)", requested.weights, permit.token)
    return permit


def _enqueue_all(
    backend: Backend,
    pairs: list[tuple[QueueDriver, QueueWaiter]],
    deadline: Deadline,
    *,
    first: bool,
) -> EnqueuedAll:
    """The first try is given at least the request timeout, as for one acquire."""
    left = deadline.remaining()
    if not first or left is None or left >= backend.request_timeout:
        return EnqueuedAll(backend.enqueue_all(pairs, deadline))
    try:
        first_try = Deadline(backend.request_timeout, time.monotonic)
        return EnqueuedAll(backend.enqueue_all(pairs, first_try))
    except AcquireTimeout as exc:
        raise BackendUnavailable(
            f"semaphores {sorted(w.semaphore for _, w in pairs)}: no answer within the "
            f"request timeout ({backend.request_timeout:g} s)"
        ) from exc


class _Names:
    def __init__(self, name: str) -> None:
        self.name = name


class MultiPermit(PermitBase):
    """Permits held in several semaphores at once. Release with :meth:`release` or a
    ``with`` block: every entry goes in one request.

    ``tokens``: each semaphore's fencing token (its entry's creation revision; one
    atomic create gives them all the same one, ``token``). ``lost`` is set when the
    session ends or an entry is deleted: one entry lost is the whole permit lost.
    """

    def __init__(
        self,
        backend: Backend,
        pairs: list[tuple[QueueDriver, QueueWaiter]],
        entries: Mapping[str, Entry],
    ) -> None:
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
        self.lost = threading.Event()  #: set when the permit is gone (never cleared)
        self._unlisten = backend.add_permit_listener(self._session_changed)

    def _signal_lost(self) -> None:
        self.lost.set()

    def transaction(self) -> FencedTransaction:
        """A transaction that commits only while *every* entry of this permit is held
        (same writes and errors as ``Permit.transaction``)."""
        entries = [(driver, self.keys[waiter.semaphore]) for driver, waiter in self._pairs]
        return self._backend.transaction_all(entries, self.token)

    def release(self) -> None:
        """Give every permit back, in one request. Idempotent; never raises; returns
        within the request timeout (the rest goes on in the background)."""
        if self._begin_release():
            self._backend.delete_all(self._pairs)
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
