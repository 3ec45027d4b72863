"""Several semaphores at once on the asyncio face: ``await abackend.acquire_all({...})``
and its :class:`AsyncMultiPermit`.

The same program as the sync face's (``semaphore_recipes.multi``: one atomic create,
one atomic delete, the per-queue protocol of ``_core.multi``), its store requests
awaited. Cancellation is an exit like a timeout, as for one acquire
(``semaphore_recipes.aio.semaphore``): a task cancelled at any await of an
``acquire_all`` removes every entry, in one request, and waits for the store to
confirm it (at most the request timeout; cancelled again, it leaves at once and the
delete goes on in the background).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._acquire import Leave, StoreCall, answer_awaited
from .._core.deadline import Deadline
from .._core.names import validate_permits
from .._core.program import run_program_async
from .._core.protocol import AwaitEvent
from .._core.queue import Entry
from .._leave import leave_in_background, release_awaited
from ..backend import Backend, QueueDriver
from ..multi import AcquireAllInbox, MultiPermitBase, Pairs, multi_acquisition
from ._waiter import Doorbell
from .permit import AsyncTransaction, LostOnLoop
from .semaphore import AsyncSemaphore

if TYPE_CHECKING:
    from .backend import AsyncBackend

log = logging.getLogger("semaphore_recipes")

__all__ = ["AsyncMultiPermit"]


class AsyncMultiPermit(LostOnLoop, MultiPermitBase):
    """Permits held in several semaphores at once, for asyncio: ``async with`` it, or
    ``await permit.release()`` (every entry in one request). ``tokens``, ``token``,
    ``weights``, ``keys``, ``state`` and ``check()`` as the sync
    :class:`~semaphore_recipes.MultiPermit`; ``lost`` is an :class:`asyncio.Event`."""

    def __init__(self, backend: Backend, pairs: Pairs, entries: Mapping[str, Entry]) -> None:
        super().__init__(backend, pairs, entries)
        self._lost_on_loop()

    def transaction(self) -> AsyncTransaction:
        """Writes that commit only while *every* entry of this permit is held: ``await
        tx.commit()``, or ``async with permit.transaction() as tx:`` (the sync face's
        writes and errors)."""
        return AsyncTransaction(self._fenced())

    async def release(self) -> None:
        """Give every permit back, in one request. Idempotent; never raises; returns
        within the request timeout (the delete goes on in the background); cancelling
        the awaiting task does not stop the delete."""
        if self._begin_release():
            backend, pairs = self._backend, self._pairs
            await release_awaited(lambda: backend.run_async(backend.delete_entries(pairs)))
            log.debug("released %s (token %d)", self.weights, self.token)


async def acquiring_all(
    abackend: AsyncBackend,
    named: Mapping[str, tuple[object, int]],
    timeout: float | None,
    blocking: bool,
) -> AsyncMultiPermit:
    """The awaited part of ``AsyncBackend.acquire_all`` (its arguments checked)."""
    # the deadline starts before the openings: they are part of the wait
    deadline = Deadline(timeout if blocking else 0.0, time.monotonic)
    backend = abackend.backend
    drivers: dict[str, QueueDriver] = {}
    for name, (what, permits) in named.items():
        sem = what if isinstance(what, AsyncSemaphore) else abackend.existing_semaphore(name)
        drivers[name] = driver = await sem._opened()
        validate_permits(permits, driver.capacity)
    loop = asyncio.get_running_loop()
    bell = Doorbell(loop)
    inbox = AcquireAllInbox(bell.ring)

    def abandon(pairs: Pairs) -> None:  # the program is being closed: not awaited
        leave_in_background(loop, backend.run_async(backend.delete_entries(pairs)))

    program = multi_acquisition(
        backend,
        drivers,
        {name: permits for name, (_, permits) in named.items()},
        inbox,
        deadline,
        blocking=blocking,
        new_permit=lambda pairs, entries: AsyncMultiPermit(backend, pairs, entries),
        abandon_nowait=abandon,
        clock=time.monotonic,
    )

    async def answer(request: object) -> Any:
        if isinstance(request, AwaitEvent):
            return await bell.wait_for(lambda: inbox.next_event(0), request.timeout)
        assert isinstance(request, (StoreCall, Leave))
        return await answer_awaited(request, backend)

    return await run_program_async(program, answer)
