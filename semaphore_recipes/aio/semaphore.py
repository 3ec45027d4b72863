""":class:`AsyncSemaphore`: the asyncio face of a semaphore.

The same protocol program as the sync face (``semaphore_recipes._acquire``), its
store requests awaited rather than blocking: no thread per waiter, no executor. What
happens on connection loss and expiry is the sync face's: a waiter keeps waiting while
the connection is down and enters the queue again (logged at WARNING) when its session
ended; a holder's permit goes SUSPENDED, then HELD or LOST.

Cancellation is an exit like a timeout: a task cancelled (``task.cancel()``,
``asyncio.timeout()``, ``asyncio.wait_for``) at any await of an acquire leaves no entry
in the store. Before the ``CancelledError`` goes on, the acquire deletes its entry and
waits for the store to confirm it (one round trip; at most 0.3 s when the store does not
answer, after which the delete goes on in the background), so the
successor is woken as by a release; a create whose reply is still on its way is found
by its id and deleted. Cancelled again during that wait, the task leaves at once and the
delete goes on in the background.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._acquire import Leave, StoreCall, acquisition, answer_awaited, validate_slot
from .._core.deadline import ONE_REPLY_FLOOR, Deadline, validate_timeout
from .._core.names import validate_capacity, validate_permits
from .._core.position import Position
from .._core.program import run_program_async
from .._core.protocol import AwaitEvent
from .._core.queue import Entry
from .._core.ramp import Ramp
from .._core.status import Status
from .._drain import Pause, StoreRun, draining, require_drain
from .._leave import leave_in_background
from .._position import DEFAULT_POSITION_INTERVAL, validate_position_arguments
from .._ramp import RampEnd, Stepped, cancelling, new_plan, ramping, require_ramp
from .._revoke import (
    DEFAULT_GRACE,
    Revoked,
    require_revoke,
    revoke_target,
    revoking,
    validate_grace,
)
from ..backend import QueueDriver, Waiter
from ..errors import AcquireTimeout
from ..limit import AsyncLimit
from ._waiter import AsyncWaiter
from .permit import AsyncPermit

if TYPE_CHECKING:
    from .backend import AsyncBackend

__all__ = ["AsyncSemaphore"]


R = TypeVar("R")  # what a ramp program returns


class AsyncSemaphore:
    """A fair FIFO counting semaphore, for asyncio. Made by ``backend.semaphore(...)``
    of an :class:`~semaphore_recipes.aio.AsyncBackend`, without I/O: the semaphore is
    opened (created, its capacity checked) on first use, or by ``await sem.open()``,
    which raises what opening raises (CapacityMismatch, SemaphoreNotFound...)."""

    def __init__(
        self,
        backend: AsyncBackend,
        name: str,
        capacity: int | None,
        *,
        adopt_capacity: bool,
        create: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backend = backend
        self._name = name
        self._asked_capacity = capacity
        self._adopt_capacity = adopt_capacity
        self._create = create
        self._clock = clock
        self.owner = backend.owner
        self._store: QueueDriver | None = None
        self._opening: asyncio.Future[QueueDriver] | None = None

    @property
    def name(self) -> str:
        """The semaphore's name, as given to ``backend.semaphore()``."""
        return self._name

    @property
    def capacity(self) -> int | None:
        """The capacity as last seen from the service (kept current by a watch); before
        the semaphore is opened, the capacity asked for (None: the stored one)."""
        return self._asked_capacity if self._store is None else self._store.capacity

    def __repr__(self) -> str:
        return f"<AsyncSemaphore {self.name!r} capacity={self.capacity}>"

    async def open(self) -> AsyncSemaphore:
        """Open the semaphore now (it is opened on first use otherwise): creates it
        with its capacity if missing and it may, and checks the stored capacity."""
        await self._opened()
        return self

    async def _opened_within(self, deadline: Deadline) -> QueueDriver:
        """The opened queue, awaited at most until ``deadline`` (or ``ONE_REPLY_FLOOR``,
        if later: opening needs one reply): AcquireTimeout then (the opening goes on,
        for the next caller)."""
        if self._store is not None:
            return self._store
        left = deadline.remaining()
        if left is None:
            return await self._opened()
        try:
            return await asyncio.wait_for(self._opened(), max(left, ONE_REPLY_FLOOR))
        except asyncio.TimeoutError:
            raise AcquireTimeout(f"semaphore {self._name!r}: not opened in time") from None

    async def _opened(self) -> QueueDriver:
        if self._store is not None:
            return self._store
        if self._opening is None or _failed(self._opening):
            opening = self._backend.backend.open_queue(
                self._name,
                self._asked_capacity,
                adopt_capacity=self._adopt_capacity,
                create=self._create,
            )
            self._opening = asyncio.ensure_future(self._backend.backend.run_async(opening))
            self._opening.add_done_callback(_failed)  # its error is the callers' (no warning)
        # shielded: one caller's cancellation must not cancel the opening others await
        store = await asyncio.shield(self._opening)
        self._store = store
        return store

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
    ) -> Acquiring[AsyncPermit]:
        """Wait in FIFO order for ``permits`` permits: ``permit = await sem.acquire()``
        or ``async with sem.acquire() as permit:``. The sync face's contract
        (:meth:`semaphore_recipes.Semaphore.acquire`): AcquireTimeout, WouldBlock,
        BackendUnavailable, TypeError/ValueError on bad arguments (raised here, before
        any I/O; ``permits`` above the capacity once the semaphore is open). Cancelling
        the awaiting task leaves no entry behind (see the module docstring).
        ``slot=True``: the permit's job slots (``permit.slots``), as on the sync face;
        SlotsNotSupported (raised here) on a backend without them. ``on_position``
        and ``position_interval``: as on the sync face, called from the event loop."""
        _check_permits_shape(permits)
        validate_timeout(timeout)
        validate_slot(slot, self._backend.backend)
        validate_position_arguments(on_position, position_interval)
        reports = (on_position, position_interval)
        return Acquiring(self._acquire(permits, timeout, blocking, watch_entry, slot, reports))

    def limit(self, permits: int = 1, timeout: float | None = None) -> AsyncLimit:
        """A decorator of coroutine functions: each call runs holding ``permits``,
        acquired with ``acquire(permits, timeout)`` and released on every way out,
        cancellation included::

            @sem.limit(timeout=5)
            async def export(batch): ...

        A call not granted in time raises AcquireTimeout without running the function.
        TypeError/ValueError on bad arguments (here, before any I/O; ``permits`` above
        the capacity when a call acquires); TypeError when applied to a plain or a
        generator function (:mod:`semaphore_recipes.limit`)."""
        _check_permits_shape(permits)
        return AsyncLimit(self.acquire, permits, timeout)

    async def _acquire(
        self,
        permits: int,
        timeout: float | None,
        blocking: bool,
        watch_entry: bool,
        slot: bool,
        reports: tuple[Callable[[Position], object] | None, float],
    ) -> AsyncPermit:
        # the deadline starts before the opening: it is part of the wait
        deadline = Deadline(timeout if blocking else 0.0, self._clock)
        store = await self._opened_within(deadline)
        validate_permits(permits, store.capacity)
        loop = asyncio.get_running_loop()
        waiter = AsyncWaiter(permits, self.owner, loop)
        backend = self._backend.backend

        def abandon_nowait(waiter: Waiter) -> None:  # the program is being closed
            leave_in_background(loop, backend.run_async(store.abandon_entry(waiter)))

        def new_permit(me: Entry, waiter: Waiter) -> AsyncPermit:
            assert waiter.token is not None
            permit = AsyncPermit(self, store, me, waiter.token, self.owner)
            permit._follow_session(self._backend.backend, waiter.session_ended)
            return permit

        program = acquisition(
            store,
            waiter,
            deadline,
            blocking=blocking,
            watch_entry=watch_entry,
            slots=slot,
            new_permit=new_permit,
            abandon_nowait=abandon_nowait,
            clock=self._clock,
            on_position=reports[0],
            position_interval=reports[1],
        )

        async def answer(request: object) -> object:
            if isinstance(request, AwaitEvent):
                return await waiter.next_event_async(request.timeout)
            assert isinstance(request, (StoreCall, Leave))
            return await answer_awaited(request, backend)

        return await run_program_async(program, answer)

    async def status(self) -> Status:
        """Capacity, holders and waiters in queue order (BackendUnavailable when they
        cannot be read within the request timeout)."""
        return await self._backend.backend.run_async((await self._opened()).status())

    async def set_capacity(
        self,
        capacity: int,
        *,
        ramp: Ramp | None = None,
        on_step: Callable[[int, int], None] | None = None,
    ) -> None:
        """Store a new capacity; waiters everywhere are woken. Holders keep what they hold.
        Without ``ramp`` it drops any capacity ramp under way; with it, move towards
        ``capacity`` by ``ramp.step`` every ``ramp.interval`` seconds (see the sync
        ``Semaphore.set_capacity``), returning when the target is reached;
        ``on_step(capacity, version)`` is called on the event loop: it must not block.
        ValueError above ``MAX_CAPACITY`` (before any I/O); BackendUnavailable when the
        write is not confirmed within the request timeout (it may still be applied)."""
        validate_capacity(capacity)
        if ramp is None:
            store = await self._opened()
            await self._backend.backend.run_async(store.set_capacity(capacity))
            return
        if not isinstance(ramp, Ramp):
            raise TypeError(f"ramp must be a Ramp, not {ramp!r}")
        require_ramp(self._backend.backend)
        plan = new_plan(capacity, ramp, self.owner, time.time())
        store = await self._opened()
        await self._run_ramp(ramping(store, plan, time.time), on_step)

    async def resume_ramp(self, *, on_step: Callable[[int, int], None] | None = None) -> bool:
        """Continue the stored capacity ramp (see the sync ``Semaphore.resume_ramp``):
        False when no plan is stored."""
        require_ramp(self._backend.backend)
        store = await self._opened()
        end = await self._run_ramp(ramping(store, None, time.time), on_step)
        return end is not RampEnd.NO_PLAN

    async def cancel_ramp(self) -> bool:
        """Drop the stored capacity ramp, keeping the capacity: False when there was none."""
        require_ramp(self._backend.backend)
        store = await self._opened()
        return await self._run_ramp(cancelling(store), None)

    async def _run_ramp(
        self,
        program: Generator[StoreRun | Pause | Stepped, object, R],
        on_step: Callable[[int, int], None] | None,
    ) -> R:
        runner = self._backend.backend

        async def answer(request: object) -> object:
            if isinstance(request, Pause):
                await asyncio.sleep(request.seconds)
            elif isinstance(request, Stepped):
                if on_step is not None:
                    on_step(request.capacity, request.version)
            else:
                assert isinstance(request, StoreRun)
                return await runner.run_async(request.program)
            return None

        return await run_program_async(program, answer)

    async def drain(self, *, wait: bool = False, timeout: float | None = None) -> Status | None:
        """Put the semaphore in the draining state (see the sync ``Semaphore.drain``):
        new acquires fail with Draining, waiters are told and leave, holders keep their
        permits; ``wait=True`` returns once the last holder released (DrainTimeout
        after ``timeout``)."""
        return await self._run_draining(True, wait, timeout)

    async def resume(self) -> None:
        """End the draining state: acquires are granted again."""
        await self._run_draining(False, False, None)

    async def _run_draining(self, drain: bool, wait: bool, timeout: float | None) -> Status | None:
        validate_timeout(timeout)
        require_drain(self._backend.backend)
        store = await self._opened()
        runner = self._backend.backend

        async def answer(request: object) -> object:
            if isinstance(request, Pause):
                await asyncio.sleep(request.seconds)
                return None
            assert isinstance(request, StoreRun)
            return await runner.run_async(request.program)

        program = draining(store, drain, wait, Deadline(timeout, self._clock))
        return await run_program_async(program, answer)

    async def revoke(
        self,
        *,
        token: int | None = None,
        owner: str | None = None,
        all: bool = False,  # (the documented name: revoke(all=True))
        force: bool = False,
        grace: float = DEFAULT_GRACE,
    ) -> Revoked:
        """Ask holders to give their permits back (see the sync ``Semaphore.revoke``):
        the holder sees ``permit.revoke_requested`` (an :class:`asyncio.Event`) set;
        ``force=True`` removes their entries after ``grace`` seconds."""
        target = revoke_target(token, owner, all)
        seconds = validate_grace(grace)
        require_revoke(self._backend.backend)
        store = await self._opened()
        runner = self._backend.backend

        async def answer(request: object) -> object:
            if isinstance(request, Pause):
                await asyncio.sleep(request.seconds)
                return None
            assert isinstance(request, StoreRun)
            return await runner.run_async(request.program)

        return await run_program_async(revoking(store, target, bool(force), seconds), answer)


class _Releasable(Protocol):
    async def release(self) -> None: ...


P = TypeVar("P", bound=_Releasable)


class Acquiring(Coroutine[Any, Any, P]):
    """An acquire in progress: a coroutine (``await`` it, or ``asyncio.create_task``
    it) that returns the permit, and an async context manager that holds the permit for
    the block (released at its end, whatever the way out). (``acquire_all`` returns
    one too, of a multi-permit.)"""

    __slots__ = ("_coro", "_permit")

    def __init__(self, coro: Coroutine[Any, Any, P]) -> None:
        self._coro = coro
        self._permit: P | None = None

    def __await__(self) -> Generator[Any, None, P]:
        return self._coro.__await__()

    def send(self, value: Any) -> Any:
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # pragma: no cover (the old signature)

    def close(self) -> None:
        self._coro.close()

    async def __aenter__(self) -> P:
        self._permit = await self._coro
        return self._permit

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._permit is not None:
            await self._permit.release()


def _check_permits_shape(permits: int) -> None:
    """TypeError/ValueError, as the sync face raises them, for ``permits`` that no
    capacity admits (the capacity is checked once the semaphore is open)."""
    if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
        validate_permits(permits, 1)


def _failed(opening: asyncio.Future[QueueDriver]) -> bool:
    """Did the opening end without a queue (an opening that failed is tried again)?"""
    return opening.done() and (opening.cancelled() or opening.exception() is not None)
