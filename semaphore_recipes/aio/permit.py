""":class:`AsyncPermit`: permits held through the asyncio face.

What happens on trouble is the sync face's (``semaphore_recipes.semaphore``): on a lost
connection ``state`` is SUSPENDED, back to HELD when the same session reconnects; when
the session ends or the entry is deleted, ``state`` is LOST and ``lost`` (an
:class:`asyncio.Event`) is set. The state changes the moment the backend learns of it
(from its own thread); ``lost`` is set through the event loop, so a task awaiting
``permit.lost.wait()`` wakes on the loop's next turn. ``revoke_requested`` (an
:class:`asyncio.Event`) is set the same way when someone asks the holder to give its
permits back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from .._core.queue import Entry
from .._leave import release_awaited
from .._permit import PermitBase
from ..backend import FencedTransaction, QueueDriver, Write

if TYPE_CHECKING:
    from .semaphore import AsyncSemaphore

log = logging.getLogger("semaphore_recipes")

__all__ = ["AsyncPermit", "AsyncTransaction"]


class LostOnLoop:
    """What both asyncio permits share: ``lost``, an :class:`asyncio.Event` of the loop
    the permit was made on, set from whichever thread learns of the loss; ``async
    with`` releases at the block's end."""

    def _lost_on_loop(self) -> asyncio.Event:
        self.lost = asyncio.Event()  #: set when the permit is gone (never cleared)
        #: set when someone asked this holder to give its permits back (never cleared)
        self.revoke_requested = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        return self.lost

    def _signal_lost(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self.lost.set()
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it any more
            self._loop.call_soon_threadsafe(self.lost.set)

    def _signal_revoke(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self.revoke_requested.set()
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it any more
            self._loop.call_soon_threadsafe(self.revoke_requested.set)

    async def release(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: L) -> L:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()


L = TypeVar("L", bound=LostOnLoop)


class AsyncPermit(LostOnLoop, PermitBase):
    """Permits held in one semaphore: ``async with`` it, or ``await permit.release()``."""

    def __init__(
        self, semaphore: AsyncSemaphore, store: QueueDriver, entry: Entry, token: int, owner: str
    ) -> None:
        super().__init__(semaphore, entry, token, owner)
        self.semaphore = semaphore
        self._lost_on_loop()
        self._store = store

    def transaction(self) -> AsyncTransaction:
        """Writes that commit only while this permit is held: ``create``, ``set``,
        ``delete``, then ``await tx.commit()`` (or ``async with permit.transaction() as
        tx:``, which commits when the block ends without an exception). The errors are
        the sync face's (:meth:`semaphore_recipes.Permit.transaction`)."""
        return AsyncTransaction(self._store.transaction(self.key, self.token))

    async def release(self) -> None:
        """Give the permits back. Idempotent; never raises; returns within the request
        timeout (the delete goes on in the background if the store cannot be reached,
        and the session's end removes the entry anyway). A LOST permit's entry is
        deleted as well; its state stays LOST. Cancelling the awaiting task does not
        stop the delete."""
        if self._begin_release():
            removal = self._store.releasing(self.key)
            backend = self._store.backend
            await release_awaited(lambda: backend.run_async(removal()))
            log.debug("released %s of %r (token %d)", self.permits, self._name, self.token)


class AsyncTransaction:
    """A fenced transaction of the asyncio face (see
    :class:`semaphore_recipes.backend.FencedTransaction` for what each call means)."""

    def __init__(self, transaction: FencedTransaction) -> None:
        self._transaction = transaction

    @property
    def store_transaction(self) -> FencedTransaction:
        """The store's own transaction, with what that store adds (PostgreSQL:
        ``semaphore_recipes.postgresql.fenced_aconnection``)."""
        return self._transaction

    @property
    def writes(self) -> list[Write]:
        """The writes added so far, in order."""
        return self._transaction.writes

    def create(self, key: str, value: bytes = b"") -> AsyncTransaction:
        self._transaction.create(key, value)
        return self

    def set(self, key: str, value: bytes) -> AsyncTransaction:
        self._transaction.set(key, value)
        return self

    def delete(self, key: str) -> AsyncTransaction:
        self._transaction.delete(key)
        return self

    async def commit(self) -> None:
        """Apply every write, or none: PermitLost, WriteConflict, PermissionDenied or
        BackendUnavailable as the sync face's ``commit()``."""
        await self._transaction.commit_async()

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.commit()
