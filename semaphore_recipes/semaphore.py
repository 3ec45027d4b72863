"""The synchronous faces: :class:`Semaphore` and :class:`Permit`.

Both are backend-neutral: they run the pure protocol (``_core.protocol``) against a
backend's queue store. What happens on trouble:

* connection lost while waiting: the wait goes on; watches survive within a session.
* session expired / lease gone while waiting: the waiter re-enters the queue with a new
  entry (logged at WARNING) until its deadline.
* connection lost while holding: ``permit.state`` is SUSPENDED (unsafe: the session may
  be expiring); back to HELD when the same session reconnects in time.
* session expired, lease gone, or the entry deleted while holding: ``permit.state`` is
  LOST and ``permit.lost`` is set; ``permit.check()`` raises PermitLost.
* the backend's client died (ZooKeeper: kazoo's connection loop ended by itself): held
  permits are LOST, waiters raise BackendUnavailable, later calls raise it at once.

Bounds: every call but a waiting ``acquire`` returns within the backend's request
timeout (the URL's ``request_timeout``, default 5 s) or raises BackendUnavailable;
``release()`` never raises (what it cannot finish in time goes on in the background).
``acquire(timeout=T)`` answers by ``T`` (plus at most 0.3 s to see its entry removed)
even when the store stops answering.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from ._acquire import Leave, StoreCall, acquisition, answer_blocking, validate_slot
from ._core.deadline import Deadline, validate_timeout
from ._core.names import validate_capacity, validate_permits
from ._core.position import Position
from ._core.program import run_program
from ._core.protocol import AwaitEvent
from ._core.queue import Entry
from ._core.ramp import Ramp
from ._core.status import Status
from ._drain import Pause, StoreRun, draining, require_drain
from ._leave import leave
from ._permit import LostEvent, PermitState
from ._position import DEFAULT_POSITION_INTERVAL, validate_position_arguments
from ._ramp import RampEnd, Stepped, cancelling, new_plan, ramping, require_ramp
from ._revoke import (
    DEFAULT_GRACE,
    Revoked,
    require_revoke,
    revoke_target,
    revoking,
    validate_grace,
)
from .backend import (
    FencedTransaction,
    QueueDriver,
    Waiter,
)
from .limit import Limit

if TYPE_CHECKING:
    from .backend import Backend

log = logging.getLogger("semaphore_recipes")
R = TypeVar("R")  # what a ramp program returns

__all__ = ["Permit", "PermitState", "Semaphore"]


class Permit(LostEvent):
    """Permits held in one semaphore. Release with :meth:`release` or a ``with`` block."""

    def __init__(self, semaphore: Semaphore, entry: Entry, token: int, owner: str) -> None:
        super().__init__(semaphore, entry, token, owner)
        self.semaphore = semaphore

    def transaction(self) -> FencedTransaction:
        """A transaction that commits only while this permit is held: ``create``,
        ``set`` and ``delete`` keys of the store, then ``commit()``.

        ``commit()`` raises PermitLost when the fence fails, WriteConflict when a write's
        condition fails, and BackendUnavailable when no answer came within the request
        timeout: then the transaction may still have been applied, or be applied later
        (see :class:`semaphore_recipes.backend.FencedTransaction`).
        """
        return self.semaphore._store.transaction(self.key, self.token)

    def release(self) -> None:
        """Give the permits back. Idempotent; never raises; returns within the request
        timeout: if the service cannot be reached the delete is retried in the
        background (the session's end removes the entry anyway). A LOST permit's entry
        is deleted as well, in case its session outlived the client's verdict; the state
        stays LOST."""
        if self._begin_release():
            store = self.semaphore._store
            store.backend.run(store.release_entry(self.key))
            log.debug("released %s of %r (token %d)", self.permits, self._name, self.token)

    def __enter__(self) -> Permit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class Semaphore:
    """A fair FIFO counting semaphore stored in a coordination service.

    Made by a backend (``backend.semaphore(name, capacity)``); see ``docs/design.md``.
    """

    def __init__(
        self,
        store: QueueDriver,
        session: Backend,
        owner: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._session = session
        self.owner = owner
        self._clock = clock

    @property
    def name(self) -> str:
        """The semaphore's name, as given to ``backend.semaphore()``."""
        return self._store.name

    @property
    def capacity(self) -> int:
        """The capacity as last seen from the service (kept current by a watch)."""
        return self._store.capacity

    def __repr__(self) -> str:
        return f"<Semaphore {self.name!r} capacity={self.capacity}>"

    def acquire(
        self,
        permits: int = 1,
        timeout: float | None = None,
        blocking: bool = True,
        *,
        watch_entry: bool = False,
        slot: bool = False,
        on_position: Callable[[Position], object] | None = None,
        position_interval: float = DEFAULT_POSITION_INTERVAL,
    ) -> Permit:
        """Wait in FIFO order for ``permits`` permits.

        Raises AcquireTimeout after ``timeout`` seconds, WouldBlock when ``blocking`` is
        False and the permits are not free now, ValueError/TypeError on bad arguments
        (at most ``MAX_CAPACITY`` permits; before any I/O). ``timeout=0`` (or any
        timeout shorter than a round trip) tries exactly once, like ``blocking=False``
        but raising AcquireTimeout: the first try's reply is always awaited, for up to
        1 s (or the request timeout if shorter), after which it raises
        BackendUnavailable. A timeout of 1 s or more is kept to the letter, also when
        the store stops answering. BackendUnavailable also ends the wait when the
        backend is closed or its client dies. On every way out without a permit
        (timeout, exception, KeyboardInterrupt) the queue entry is removed: the call
        waits at most 0.3 s for the store to confirm it, then the removal goes on in
        the background (the session's end removes the entry in any case).

        While the service cannot be reached, the call keeps waiting (and retrying)
        until ``timeout``; with ``timeout=None`` it waits for the service to come back.
        If the session expires (ZooKeeper) or the lease is gone (etcd) while it waits,
        it enters the queue again at the back with the new session, logged at WARNING.

        ``watch_entry=True`` also watches the permit's own entry, so that its deletion
        from outside (an operator, a lease revoked by hand) sets ``permit.lost`` at
        once rather than at the next session check; it costs one watch per acquire.

        ``slot=True`` also gives the permit ``permits`` distinct *job slots*
        (``permit.slots``: indices in ``0..capacity-1``, each with a token), taken after
        admission: one listing and one create per slot, or nothing more where the
        store's admitting write gives them (Redis) (docs/user-guide.md, "Job slots").
        SlotsNotSupported (before any I/O) on a backend without them.

        ``on_position``: while the acquire waits, it reads the queue's status at most
        every ``position_interval`` seconds and calls ``on_position(position)`` (a
        :class:`~semaphore_recipes.Position`: waiting entries and permits ahead, the
        holders, the time waited) from the acquiring thread after each read that finds
        it still waiting. No read is made without it, nor in the last request timeout
        before ``timeout``; an exception it raises ends the acquire (its entry removed)
        (docs/user-guide.md, "Where am I in the queue").
        """
        validate_permits(permits, self._store.capacity)
        validate_timeout(timeout)
        validate_slot(slot, self._session)
        validate_position_arguments(on_position, position_interval)
        # blocking=False: one try, like timeout=0 (it raises WouldBlock rather than
        # AcquireTimeout, and so does the protocol before it looks at the deadline)
        deadline = Deadline(timeout if blocking else 0.0, self._clock)
        waiter = Waiter(permits, self.owner)
        store = self._store
        backend = self._session

        def abandon_nowait(waiter: Waiter) -> None:
            # the program is being closed: the removal on a thread, waited for briefly
            removal = store.abandon_entry(waiter)
            leave(
                lambda: backend.run(removal),
                store.name,
                store.request_timeout,
                backend.instrumentation,
            )

        program = acquisition(
            store,
            waiter,
            deadline,
            blocking=blocking,
            watch_entry=watch_entry,
            slots=slot,
            new_permit=self._new_permit,
            abandon_nowait=abandon_nowait,
            clock=self._clock,
            on_position=on_position,
            position_interval=position_interval,
        )

        def answer(request: object) -> object:
            if isinstance(request, AwaitEvent):
                return waiter.next_event(request.timeout)
            assert isinstance(request, (StoreCall, Leave))
            return answer_blocking(request, backend)

        return run_program(program, answer)

    def limit(self, permits: int = 1, timeout: float | None = None) -> Limit:
        """A decorator: each call of the decorated function runs holding ``permits``,
        acquired with ``acquire(permits, timeout)`` and released on every way out::

            @sem.limit(timeout=5)
            def export(batch): ...

        A call not granted in time raises AcquireTimeout without running the function.
        TypeError/ValueError on bad arguments (here, before any I/O); TypeError when
        applied to a coroutine function or a generator function
        (:mod:`semaphore_recipes.limit`)."""
        validate_permits(permits, self._store.capacity)
        return Limit(self.acquire, permits, timeout)

    def _new_permit(self, me: Entry, waiter: Waiter) -> Permit:
        assert waiter.token is not None
        permit = Permit(self, me, waiter.token, self.owner)
        permit._follow_session(self._session, waiter.session_ended)
        return permit

    def status(self) -> Status:
        """Capacity, holders and waiters in queue order. etcd reads them in one
        transaction; ZooKeeper lists the entries, then reads each one (an entry that
        leaves meanwhile is left out). Raises BackendUnavailable when they cannot be
        read within the request timeout."""
        return self._session.run(self._store.status())

    def set_capacity(
        self,
        capacity: int,
        *,
        ramp: Ramp | None = None,
        on_step: Callable[[int, int], None] | None = None,
    ) -> None:
        """Store a new capacity; waiters everywhere are woken. Holders keep what they hold.
        Without ``ramp`` it drops any capacity ramp under way.

        ``ramp=Ramp(step, interval)``: move towards ``capacity`` by ``step`` every
        ``interval`` seconds instead, each step an ordinary capacity change; the plan is
        stored beside the capacity (``status().ramp``), replacing any other, and this
        call returns when the target is reached (the first step is applied at once),
        or when another client dropped or replaced the plan. ``on_step(capacity,
        version)`` is called after each step this call applies. If this process dies
        the plan stays stored: :meth:`resume_ramp` continues it.

        ValueError above ``MAX_CAPACITY`` (before any I/O); NotSupported for a ramp on
        a store without it; BackendUnavailable when a write is not confirmed within the
        request timeout (it may still be applied).
        """
        validate_capacity(capacity)
        if ramp is None:
            self._session.run(self._store.set_capacity(capacity))
            return
        if not isinstance(ramp, Ramp):
            raise TypeError(f"ramp must be a Ramp, not {ramp!r}")
        require_ramp(self._session)
        plan = new_plan(capacity, ramp, self.owner, time.time())
        self._run_ramp(ramping(self._store, plan, time.time), on_step)

    def resume_ramp(self, *, on_step: Callable[[int, int], None] | None = None) -> bool:
        """Continue the capacity ramp stored for this semaphore (one whose client died):
        a step overdue is applied at once, then one per interval, until the target.
        False when no plan is stored; like :meth:`set_capacity` otherwise. Two clients
        resuming the same plan apply each step once."""
        require_ramp(self._session)
        end = self._run_ramp(ramping(self._store, None, time.time), on_step)
        return end is not RampEnd.NO_PLAN

    def cancel_ramp(self) -> bool:
        """Drop the stored capacity ramp, keeping the capacity where it is now (a
        client running it stops at its next step): False when there was none."""
        require_ramp(self._session)
        return self._run_ramp(cancelling(self._store), None)

    def _run_ramp(
        self,
        program: Generator[StoreRun | Pause | Stepped, object, R],
        on_step: Callable[[int, int], None] | None,
    ) -> R:
        def answer(request: object) -> object:
            if isinstance(request, Pause):
                time.sleep(request.seconds)
            elif isinstance(request, Stepped):
                if on_step is not None:
                    on_step(request.capacity, request.version)
            else:
                assert isinstance(request, StoreRun)
                return self._session.run(request.program)
            return None

        return run_program(program, answer)

    def drain(self, *, wait: bool = False, timeout: float | None = None) -> Status | None:
        """Put the semaphore in the *draining* state: new acquires (here and in every
        other process) fail at once with Draining, waiters already queued are told the
        same and leave the queue, holders keep their permits. Stored beside the
        capacity, until :meth:`resume`.

        ``wait=True`` then returns once the last holder released (the status read
        then), or raises DrainTimeout after ``timeout`` seconds (the semaphore stays
        draining). NotSupported on a backend without it, ValueError/TypeError on a bad
        timeout (before any I/O); BackendUnavailable when a request is not answered
        within the request timeout.
        """
        return self._run_draining(True, wait, timeout)

    def resume(self) -> None:
        """End the draining state: acquires are granted again."""
        self._run_draining(False, False, None)

    def _run_draining(self, drain: bool, wait: bool, timeout: float | None) -> Status | None:
        validate_timeout(timeout)
        require_drain(self._session)

        def answer(request: object) -> object:
            if isinstance(request, Pause):
                time.sleep(request.seconds)
                return None
            assert isinstance(request, StoreRun)
            return self._session.run(request.program)

        program = draining(self._store, drain, wait, Deadline(timeout, self._clock))
        return run_program(program, answer)

    def revoke(
        self,
        *,
        token: int | None = None,
        owner: str | None = None,
        all: bool = False,  # (the documented name: revoke(all=True))
        force: bool = False,
        grace: float = DEFAULT_GRACE,
    ) -> Revoked:
        """Ask holders to give their permits back: the holder of fencing ``token``, the
        holders made by ``owner`` (``connect(owner=...)``), or ``all`` of them (exactly
        one). A revoke request is written on each one's entry; a holder that watches
        it (``acquire(watch_entry=True)``) sees ``permit.revoke_requested`` set.

        ``force=True`` then waits ``grace`` seconds and removes the entries still held
        with the same token, as a session's end would: the old holder's fenced writes
        fail and its ``lost`` is set; the next waiters are admitted in queue order.
        Answers ``Revoked(asked, removed)``. ValueError/TypeError on bad arguments and
        NotSupported on a store without it (before any I/O); BackendUnavailable when a
        request is not answered within the request timeout.
        """
        target = revoke_target(token, owner, all)
        seconds = validate_grace(grace)
        require_revoke(self._session)

        def answer(request: object) -> object:
            if isinstance(request, Pause):
                time.sleep(request.seconds)
                return None
            assert isinstance(request, StoreRun)
            return self._session.run(request.program)

        return run_program(revoking(self._store, target, bool(force), seconds), answer)
