"""Fenced writes on MySQL: the key-value writes of every store, and the caller's own SQL.

``permit.transaction()`` gives a :class:`MySQLFencedTransaction`. Its
``create``/``set``/``delete`` writes go to ``sr_data`` in one call that checks the fence
first (:meth:`~MySQLFencedTransaction.apply`). :func:`fenced_connection`
(``fenced_aconnection`` on the asyncio face) opens a database transaction in which the
permit's entries are checked and locked (``LOCK IN SHARE MODE``) before anything else:
the caller's SQL on that connection commits only while the permit is held, and an
admission that would delete an entry (its session expired meanwhile) waits for that
commit, so the next holder's writes come after it.

On connection loss the transaction is rolled back by the server; a commit whose reply
did not come may or may not have been applied (read back before writing again). The
transaction's connection waits for a lock at most the session timeout
(``innodb_lock_wait_timeout``), and the server ends it when it stays idle that long
(``wait_timeout``): a holder paused inside it cannot hold the queue back for longer.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import TYPE_CHECKING, Any, Protocol

import pymysql

from ..backend import FencedTransaction, Program
from ..errors import BackendUnavailable, PermitLost, WriteConflict
from .wire import json_arg

if TYPE_CHECKING:
    from .backend import MySQLBackend

__all__ = ["MySQLFencedTransaction", "fenced_aconnection", "fenced_connection"]


class MySQLFencedTransaction(FencedTransaction):
    """Writes that commit only while the permit's entries are there with its token,
    held, and their session alive."""

    def __init__(
        self, backend: MySQLBackend, entries: Sequence[tuple[str, str]], token: int
    ) -> None:
        super().__init__(backend)
        self.backend = backend
        #: (semaphore, entry id) of each entry of the permit
        self.entries = tuple(entries)
        self.token = token

    def _fence_args(self) -> tuple[str, str, int]:
        return (
            json_arg([name for name, _ in self.entries]),
            json_arg([key for _, key in self.entries]),
            self.token,
        )

    def _lost(self) -> PermitLost:
        names = ", ".join(repr(name) for name, _ in self.entries)
        return PermitLost(
            f"semaphore {names}: the permit's entry is gone, no longer held by its token, "
            "or its session expired; nothing was written"
        )

    def apply(self) -> Program[None]:
        """The key-value writes, with the fence, in one call (not sent again)."""
        backend = self.backend
        outcome = yield from backend.step(
            "fenced_write",
            (
                *self._fence_args(),
                [w.kind.value for w in self.writes],
                [w.key for w in self.writes],
                [w.value for w in self.writes],
            ),
            f"a fenced write on {backend.describe()}",
            retry=False,
        )
        if outcome == "lost":
            raise self._lost()
        if outcome is not None and outcome.startswith("conflict:"):
            raise WriteConflict(
                outcome.removeprefix("conflict:"),
                "its condition failed (create of a key that exists, or set/delete of "
                "one that does not); nothing was written",
            )

    def _open(self) -> pymysql.connections.Connection[Any]:
        """A new connection of the caller's own, in a transaction whose fence held."""
        backend = self.backend
        seconds = max(1, math.ceil(backend.params.session_timeout))
        try:
            conn = backend.connect(backend.params.connect_timeout).raw
        except pymysql.err.MySQLError as exc:
            raise BackendUnavailable(f"{backend.describe()}: {exc}") from exc
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {seconds}")
                cursor.execute(f"SET SESSION wait_timeout = {seconds}")
            conn.autocommit(False)
            conn.begin()
            with conn.cursor() as cursor:
                cursor.execute("CALL sr_check_fence(%s, %s, %s)", self._fence_args())
                held = cursor.fetchone()
                while cursor.nextset():
                    pass
            if not held or str(held[0]) != "1":
                raise self._lost()
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection[Any]]:
        """A connection inside a transaction fenced by the permit: PermitLost at once
        when the fence fails; committed when the block ends, rolled back when it
        raises. The key-value writes added to this object are not part of it."""
        conn = self._open()
        try:
            yield conn
            conn.commit()
        except BaseException:
            if conn.open:
                conn.rollback()
            raise
        finally:
            conn.close()

    @asynccontextmanager
    async def aconnection(self) -> AsyncIterator[pymysql.connections.Connection[Any]]:
        """:meth:`connection` for the asyncio face: the connection is PyMySQL's (blocking);
        run its calls with ``await asyncio.to_thread(...)``."""
        conn = await asyncio.to_thread(self._open)
        try:
            yield conn
            await asyncio.to_thread(conn.commit)
        except BaseException:
            if conn.open:
                await asyncio.to_thread(conn.rollback)
            raise
        finally:
            conn.close()


class HasTransaction(Protocol):
    """A permit of the sync face (one semaphore, or ``acquire_all``'s)."""

    def transaction(self) -> FencedTransaction: ...


class HasStoreTransaction(Protocol):
    """A fenced transaction of the asyncio face."""

    @property
    def store_transaction(self) -> FencedTransaction: ...


class HasAsyncTransaction(Protocol):
    """A permit of the asyncio face."""

    def transaction(self) -> HasStoreTransaction: ...


def fenced_connection(
    permit: HasTransaction,
) -> AbstractContextManager[pymysql.connections.Connection[Any]]:
    """A connection inside a database transaction fenced by ``permit`` (a permit of a
    MySQL backend): ``with fenced_connection(permit) as conn: conn.cursor().execute(...)``
    commits only while the permit is held (PermitLost before anything runs, else)."""
    return _mysql(permit.transaction()).connection()


def fenced_aconnection(
    permit: HasAsyncTransaction,
) -> AbstractAsyncContextManager[pymysql.connections.Connection[Any]]:
    """:func:`fenced_connection` for a permit of the asyncio face."""
    return _mysql(permit.transaction().store_transaction).aconnection()


def _mysql(transaction: FencedTransaction) -> MySQLFencedTransaction:
    if not isinstance(transaction, MySQLFencedTransaction):
        raise TypeError(f"not a permit of a mysql backend ({type(transaction).__name__})")
    return transaction
