"""The two runners of PostgreSQL programs, and the one retry policy of their statements.

A program (``semaphore_recipes.backend.Program``) yields :class:`Statement` (run one
statement on a connection of the runner's pool) or :class:`Pause`, and receives the
statement's answer (the first column of its first row) or has its error thrown in.
:class:`SyncRunner` answers by blocking the calling thread (``poll``), :class:`AsyncRunner`
by awaiting the loop's readers; the statement itself (:mod:`.wire`) is the same program
for both. :func:`call` is the retry policy: a lost connection, a deadlock abort or a
server shutting down is tried again within the bound, then becomes BackendUnavailable
(AcquireTimeout for a waiting acquire's deadline).

A pool holds at most ``size`` connections; a connection that failed, missed its
deadline or was interrupted mid-statement is closed, never reused.
"""

from __future__ import annotations

import asyncio
import select
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import psycopg
from psycopg import pq

from ..backend import Deadline, Program, run_program, run_program_async
from ..errors import (
    AcquireTimeout,
    AuthenticationFailed,
    BackendUnavailable,
    PermissionDenied,
    SemaphoreError,
)
from ..sql.requests import Pause, Soon
from .wire import (
    ConnectRefused,
    NoReply,
    NothingListens,
    Param,
    Readable,
    StatementError,
    Writable,
    connecting,
    executing,
)

__all__ = ["AsyncRunner", "Pause", "Soon", "Statement", "SyncRunner", "call", "translate"]

T = TypeVar("T")
#: how long a failed statement waits before it is sent again
RETRY_PAUSE = 0.1
#: how often an awaited statement looks for a free connection of a full pool
POOL_POLL = 0.005
#: SQLSTATEs worth sending again: serialization failure, deadlock, lock not available,
#: the server shutting down or starting up
RETRIED = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03"})
#: SQLSTATEs that say the library's schema is missing (or older than its functions)
NO_SCHEMA = frozenset({"3F000", "42P01", "42883"})


@dataclass(frozen=True)
class Statement:
    """Run ``sql`` with ``params`` (None: a script of several statements) on a pooled
    connection, awaiting its reply at most ``timeout`` seconds."""

    sql: bytes
    params: tuple[Param, ...] | None
    timeout: float


class SchemaMissing(SemaphoreError):
    """The library's tables or functions are not in the schema (``sqlstate`` says which)."""


def translate(exc: BaseException, where: str, user: str | None) -> BaseException:
    """The library's error for a connection failure or a server's refusal."""
    text = str(exc)
    if isinstance(exc, StatementError):
        if exc.sqlstate.startswith("28"):
            return AuthenticationFailed("postgresql", user, where, text)
        if exc.sqlstate == "42501":
            return PermissionDenied("postgresql", user, where, text)
        if exc.sqlstate in NO_SCHEMA:
            return SchemaMissing(f"{where}: {text}")
    if isinstance(exc, ConnectRefused) and any(
        said in text
        for said in ("authentication failed", "no password supplied", "pg_hba.conf", 'role "')
    ):
        return AuthenticationFailed("postgresql", user, where, text)
    return BackendUnavailable(f"{where}: {text}")


def transient(exc: BaseException) -> bool:
    """Is ``exc`` worth sending the statement again for?"""
    if isinstance(exc, StatementError):
        return exc.sqlstate in RETRIED
    return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, ConnectRefused)


def call(
    sql: bytes,
    params: Sequence[Param] | None,
    *,
    where: str,
    bound: Deadline,
    request_timeout: float,
    waiting: bool = False,
    retry: bool = True,
    user: str | None = None,
    opening: bool = False,
) -> Program[str | None]:
    """Run one statement, sent again after a transient failure until ``bound`` passes
    (each step's function is written so that a second run after a lost reply does no
    harm; a fenced commit is not, and passes ``retry=False``); each try awaits its
    reply at most ``request_timeout``. When the bound passes: AcquireTimeout for a
    waiting acquire's deadline (``waiting``), else BackendUnavailable. ``opening``: a
    backend's first statement, which a server that refuses every connection (nothing
    listens) ends at once."""
    values = None if params is None else tuple(params)
    while True:
        try:
            reply = yield Statement(sql, values, bound.cap(request_timeout))
            assert reply is None or isinstance(reply, str)
            return reply
        except (psycopg.OperationalError, StatementError) as exc:
            refused = opening and isinstance(exc, NothingListens)
            if refused or not transient(exc) or not retry or bound.expired():
                if waiting and transient(exc):
                    raise AcquireTimeout(f"{where}: unreachable ({exc})") from exc
                raise translate(exc, where, user) from exc
        yield Pause(bound.cap(RETRY_PAUSE))


class _Pool:
    """The connections of a runner: idle ones, and how many are open."""

    def __init__(self, conninfo: str, connect_timeout: float, size: int) -> None:
        self.conninfo = conninfo
        self.connect_timeout = connect_timeout
        self.size = size
        self.idle: list[pq.abc.PGconn] = []
        self.open = 0
        self.closed = False

    def statement(self, conn: pq.abc.PGconn | None, request: Statement) -> Program[object]:
        """Run ``request`` on ``conn`` (None: a new connection, made first); answers
        ``(conn, value)``."""
        if conn is None:
            timeout = min(request.timeout, self.connect_timeout)
            try:
                conn = yield from connecting(self.conninfo, timeout)
            except BaseException:
                self.discard(None)
                raise
        try:
            value = yield from executing(conn, request.sql, request.params, request.timeout)
        except StatementError:
            self.give(conn)
            raise
        except BaseException:
            self.discard(conn)
            raise
        self.give(conn)
        return value

    def give(self, conn: pq.abc.PGconn) -> None:
        if self.closed or conn.transaction_status != pq.TransactionStatus.IDLE:
            self.discard(conn)
            return
        self.idle.append(conn)

    def discard(self, conn: pq.abc.PGconn | None) -> None:
        self.open -= 1
        if conn is not None:
            conn.finish()

    def close(self) -> None:
        self.closed = True
        for conn in self.idle:
            conn.finish()
        self.idle.clear()


def wait_blocking(request: object) -> object:
    """Answer a :mod:`.wire` wait by blocking: NoReply when its deadline passes."""
    assert isinstance(request, (Readable, Writable))
    poller = select.poll()
    poller.register(request.fd, select.POLLIN if isinstance(request, Readable) else select.POLLOUT)
    while True:
        left = request.deadline - time.monotonic()
        if left <= 0:
            raise NoReply("no reply in time")
        if poller.poll(left * 1000):
            return None


async def wait_awaited(request: object) -> object:
    """Answer a :mod:`.wire` wait on the running loop: NoReply when its deadline passes.
    (A timer of its own, not ``asyncio.wait_for``, which on Python 3.10 and 3.11 can
    swallow a cancellation that lands as the socket becomes ready.)"""
    assert isinstance(request, (Readable, Writable))
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    def late() -> None:
        if not ready.done():
            ready.set_exception(NoReply("no reply in time"))

    reading = isinstance(request, Readable)
    (loop.add_reader if reading else loop.add_writer)(request.fd, wake)
    timer = loop.call_at(loop.time() + max(request.deadline - time.monotonic(), 0.0), late)
    try:
        await ready
    finally:
        timer.cancel()
        (loop.remove_reader if reading else loop.remove_writer)(request.fd)
    return None


class SyncRunner:
    """Runs programs on blocking connections (threads share the pool)."""

    def __init__(self, conninfo: str, connect_timeout: float, size: int) -> None:
        self._pool = _Pool(conninfo, connect_timeout, size)
        self._free = threading.Condition()

    def run(self, program: Program[T]) -> T:
        return run_program(program, self._answer)

    def _answer(self, request: object) -> object:
        if isinstance(request, Pause):
            time.sleep(request.seconds)
            return None
        if isinstance(request, Soon):
            try:
                self.run(request.program())
            except SemaphoreError:
                request.failed()
            return None
        assert isinstance(request, Statement), request
        conn = self._take(request.timeout)
        try:
            return run_program(self._pool.statement(conn, request), wait_blocking)
        finally:
            with self._free:
                self._free.notify()

    def _take(self, timeout: float) -> pq.abc.PGconn | None:
        pool = self._pool
        with self._free:
            if not self._free.wait_for(lambda: pool.idle or pool.open < pool.size, timeout):
                raise NoReply(f"no free connection within {timeout:.2f} s")
            if pool.closed:
                raise psycopg.OperationalError("the runner is closed")
            if pool.idle:
                return pool.idle.pop()
            pool.open += 1
            return None

    def close(self) -> None:
        with self._free:
            self._pool.close()
            self._free.notify_all()


class AsyncRunner:
    """Runs programs awaited on the loop they were first run from (the asyncio face)."""

    def __init__(self, conninfo: str, connect_timeout: float, size: int) -> None:
        self._pool = _Pool(conninfo, connect_timeout, size)
        self._soon: set[asyncio.Task[None]] = set()  # (a task nobody holds may be collected)

    async def run(self, program: Program[T]) -> T:
        return await run_program_async(program, self._answer)

    async def _answer(self, request: object) -> object:
        if isinstance(request, Pause):
            await asyncio.sleep(request.seconds)
            return None
        if isinstance(request, Soon):
            asyncio.get_running_loop().call_soon(self._start, request)
            return None
        assert isinstance(request, Statement), request
        pool = self._pool
        give_up = time.monotonic() + request.timeout
        while not pool.idle and pool.open >= pool.size:  # (rare: polled, cancellable)
            if time.monotonic() > give_up:
                raise NoReply(f"no free connection within {request.timeout:.2f} s")
            await asyncio.sleep(POOL_POLL)
        if pool.closed:
            raise psycopg.OperationalError("the runner is closed")
        conn = pool.idle.pop() if pool.idle else None
        if conn is None:
            pool.open += 1
        return await run_program_async(pool.statement(conn, request), wait_awaited)

    def _start(self, soon: Soon) -> None:
        """(On the loop, once the task that asked for ``soon`` has ended its step.)"""
        if self._pool.closed:
            return
        task = asyncio.get_running_loop().create_task(self._follow_up(soon))
        self._soon.add(task)
        task.add_done_callback(self._soon.discard)

    async def _follow_up(self, soon: Soon) -> None:
        try:
            await self.run(soon.program())
        except SemaphoreError:
            soon.failed()

    def close(self) -> None:
        self._pool.close()
