"""Fenced writes on PostgreSQL: the key-value writes of every store, and the caller's own SQL.

``permit.transaction()`` gives a :class:`PostgreSQLFencedTransaction`. Its
``create``/``set``/``delete`` writes go to ``<schema>.data`` in one statement that
checks the fence first (:meth:`~PostgreSQLFencedTransaction.commit`). Its
:meth:`~PostgreSQLFencedTransaction.connection` (``aconnection`` on the asyncio face)
opens a database transaction in which the permit's entry is checked and locked
(``FOR SHARE``) before anything else: the caller's SQL on that connection commits only
while the permit is held, and an admission that would delete the entry (its session
expired meanwhile) waits for that commit, so the next holder's writes come after it.

On connection loss the transaction is rolled back by the server; a commit whose reply
did not come may or may not have been applied (read back before writing again). The
transaction's connection ends a transaction left idle for a session timeout
(``idle_in_transaction_session_timeout``): a holder paused inside it cannot hold the
queue back for longer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from ..backend import FencedTransaction, Program
from ..errors import BackendUnavailable, PermitLost, WriteConflict
from .wire import bytea_array, text_array

if TYPE_CHECKING:
    from .backend import PostgreSQLBackend


class PostgreSQLFencedTransaction(FencedTransaction):
    """Writes that commit only while the permit's entries are there with its token,
    held, and their session alive."""

    def __init__(
        self, backend: PostgreSQLBackend, entries: Sequence[tuple[str, str]], token: int
    ) -> None:
        super().__init__(backend)
        self.backend = backend
        #: (semaphore, entry id) of each entry of the permit
        self.entries = tuple(entries)
        self.token = token

    def _fence_params(self) -> tuple[str, str, str]:
        return (
            text_array([name for name, _ in self.entries]),
            text_array([key for _, key in self.entries]),
            str(self.token),
        )

    def _fence_lists(self) -> tuple[list[str], list[str], int]:
        return [name for name, _ in self.entries], [key for _, key in self.entries], self.token

    def _lost(self) -> PermitLost:
        names = ", ".join(repr(name) for name, _ in self.entries)
        return PermitLost(
            f"semaphore {names}: the permit's entry is gone, no longer held by its token, "
            "or its session expired; nothing was written"
        )

    def apply(self) -> Program[None]:
        """The key-value writes, with the fence, in one statement (not sent again)."""
        backend = self.backend
        outcome = yield from backend.statement(
            "SELECT {s}.fenced_write($1, $2, $3, $4, $5, $6)",
            (
                *self._fence_params(),
                text_array([w.kind.value for w in self.writes]),
                text_array([w.key for w in self.writes]),
                bytea_array([w.value for w in self.writes]),
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

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        """A connection inside a transaction fenced by the permit: PermitLost at once
        when the fence fails; committed when the block ends, rolled back when it
        raises. The key-value writes added to this object are not part of it."""
        backend = self.backend
        try:
            conn = psycopg.connect(backend.conninfo, **backend.transaction_options())
        except psycopg.OperationalError as exc:
            raise BackendUnavailable(f"{backend.describe()}: {exc}") from exc
        with conn, conn.transaction():
            held = conn.execute(backend.sql("SELECT {s}.fence(%s, %s, %s)"),
                                self._fence_lists()).fetchone()  # fmt: skip
            if not held or not held[0]:
                raise self._lost()
            yield conn

    @asynccontextmanager
    async def aconnection(self) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
        """:meth:`connection` for the asyncio face."""
        backend = self.backend
        try:
            conn = await psycopg.AsyncConnection.connect(
                backend.conninfo, **backend.transaction_options()
            )
        except psycopg.OperationalError as exc:
            raise BackendUnavailable(f"{backend.describe()}: {exc}") from exc
        async with conn, conn.transaction():
            cursor = await conn.execute(
                backend.sql("SELECT {s}.fence(%s, %s, %s)"), self._fence_lists()
            )
            held = await cursor.fetchone()
            if not held or not held[0]:
                raise self._lost()
            yield conn


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
) -> AbstractContextManager[psycopg.Connection[tuple[Any, ...]]]:
    """A connection inside a database transaction fenced by ``permit`` (a permit of a
    PostgreSQL backend): ``with fenced_connection(permit) as conn: conn.execute(...)``
    commits only while the permit is held (PermitLost before anything runs, else)."""
    return _postgresql(permit.transaction()).connection()


def fenced_aconnection(
    permit: HasAsyncTransaction,
) -> AbstractAsyncContextManager[psycopg.AsyncConnection[tuple[Any, ...]]]:
    """:func:`fenced_connection` for a permit of the asyncio face:
    ``async with fenced_aconnection(permit) as conn: await conn.execute(...)``."""
    return _postgresql(permit.transaction().store_transaction).aconnection()


def _postgresql(transaction: FencedTransaction) -> PostgreSQLFencedTransaction:
    if not isinstance(transaction, PostgreSQLFencedTransaction):
        raise TypeError(f"not a permit of a postgresql backend ({type(transaction).__name__})")
    return transaction
