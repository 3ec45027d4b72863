"""The two runners of MySQL programs, and the one retry policy of their calls.

A program yields :class:`Statement` (run one call on a connection of the runner's
pool), ``Pause`` or ``Soon`` (:mod:`semaphore_recipes.sql.requests`), and receives the
call's answer or has its error thrown in. :class:`SyncRunner` runs the call on the
calling thread; :class:`AsyncRunner` runs it on a worker thread of its own and awaits
it, since the driver blocks: a cancelled await leaves the call to finish within its
bound on that thread, and the program's interrupt handling treats the step as maybe
applied, as after a lost reply. :func:`call` is the retry policy: a lost connection, a
deadlock abort (1213), a lock wait timeout (1205) or a server shutting down is tried
again within the bound, then becomes BackendUnavailable (AcquireTimeout for a waiting
acquire's deadline).

A pool holds at most ``size`` connections; a broken one is closed, never reused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pymysql

from ..backend import Deadline, Program, run_program, run_program_async
from ..errors import (
    AcquireTimeout,
    AuthenticationFailed,
    BackendUnavailable,
    PermissionDenied,
    SemaphoreError,
)
from ..sql.requests import Pause, Soon
from .wire import Arg, Connection, error_code

__all__ = ["AsyncRunner", "SchemaMissing", "Statement", "SyncRunner", "call", "translate"]

T = TypeVar("T")
#: how long a failed call waits before it is sent again
RETRY_PAUSE = 0.1
#: error numbers worth sending again: deadlock, lock wait timeout, the query or the
#: connection killed, the server shutting down, the driver's lost or refused connection
RETRIED = frozenset({1213, 1205, 1317, 1927, 1053, 1040, 4031, 2002, 2003, 2006, 2013, 2055})
#: the driver could not connect at all (nothing listens, or no route)
UNREACHABLE = frozenset({2002, 2003})
#: the library's tables or procedures are missing
NO_SCHEMA = frozenset({1146, 1305})
#: access denied: to a table, a routine, a database, or an operation
DENIED = frozenset({1142, 1370, 1044, 1227, 1143})


@dataclass(frozen=True)
class Statement:
    """Run ``sql`` with ``args`` on a pooled connection within ``timeout`` seconds."""

    sql: str
    args: tuple[Arg, ...]
    timeout: float


class SchemaMissing(SemaphoreError):
    """The library's tables or procedures are not in the database."""


class NoConnection(pymysql.err.OperationalError):
    """No free connection of the pool in time, or the runner is closed."""


def translate(exc: BaseException, where: str, user: str | None) -> BaseException:
    """The library's error for a connection failure or a server's refusal."""
    code = error_code(exc)
    text = f"{where}: {exc}"
    if code == 1045:
        return AuthenticationFailed("mysql", user, where, str(exc))
    if code in DENIED:
        return PermissionDenied("mysql", user, where, str(exc))
    if code in NO_SCHEMA:
        return SchemaMissing(text)
    if code == 1049:
        return BackendUnavailable(f"{text}: create the database first (docs/operations.md)")
    return BackendUnavailable(text)


def transient(exc: BaseException) -> bool:
    """Is ``exc`` worth sending the call again for?"""
    return error_code(exc) in RETRIED or isinstance(exc, NoConnection)


def call(
    sql: str,
    args: Sequence[Arg],
    *,
    where: str,
    bound: Deadline,
    request_timeout: float,
    waiting: bool = False,
    retry: bool = True,
    user: str | None = None,
    opening: bool = False,
) -> Program[str | None]:
    """Run one call, sent again after a transient failure until ``bound`` passes (each
    step's procedure is written so that a second run after a lost reply does no harm;
    a fenced commit is not, and passes ``retry=False``); each try awaits its reply at
    most ``request_timeout``. When the bound passes: AcquireTimeout for a waiting
    acquire's deadline (``waiting``), else BackendUnavailable. ``opening``: a backend's
    first call, which a server that refuses every connection ends at once."""
    values = tuple(args)
    while True:
        try:
            reply = yield Statement(sql, values, bound.cap(request_timeout))
            assert reply is None or isinstance(reply, str)
            return reply
        except pymysql.err.MySQLError as exc:
            refused = opening and error_code(exc) in UNREACHABLE
            if refused or not transient(exc) or not retry or bound.expired():
                if waiting and transient(exc):
                    raise AcquireTimeout(f"{where}: unreachable ({exc})") from exc
                raise translate(exc, where, user) from exc
        yield Pause(bound.cap(RETRY_PAUSE))


Connector = Callable[[float], Connection]


class _Pool:
    """The connections of a runner: idle ones, how many are open, and who waits."""

    def __init__(self, connect: Connector, size: int) -> None:
        self.connect = connect
        self.size = size
        self.idle: list[Connection] = []
        self.open = 0
        self.closed = False
        self.free = threading.Condition()

    def run(self, request: Statement) -> str | None:
        """Run ``request`` on a pooled connection (made when none is idle), blocking."""
        give_up = time.monotonic() + request.timeout
        with self.free:
            if not self.free.wait_for(lambda: self.idle or self.open < self.size, request.timeout):
                raise NoConnection(2013, f"no free connection within {request.timeout:.2f} s")
            if self.closed:
                raise NoConnection(2013, "the runner is closed")
            conn = self.idle.pop() if self.idle else None
            if conn is None:
                self.open += 1
        try:
            if conn is None:
                conn = self.connect(max(give_up - time.monotonic(), 0.001))
            return conn.call(request.sql, request.args, max(give_up - time.monotonic(), 0.001))
        finally:
            self._give(conn)

    def _give(self, conn: Connection | None) -> None:
        with self.free:
            if conn is None or conn.broken or self.closed:
                self.open -= 1
                if conn is not None:
                    conn.close()
            else:
                self.idle.append(conn)
            self.free.notify()

    def close(self) -> None:
        with self.free:
            self.closed = True
            for conn in self.idle:
                conn.close()
            self.idle.clear()
            self.free.notify_all()


class SyncRunner:
    """Runs programs on blocking connections (threads share the pool)."""

    def __init__(self, connect: Connector, size: int) -> None:
        self._pool = _Pool(connect, size)

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
        return self._pool.run(request)

    def close(self) -> None:
        self._pool.close()


class AsyncRunner:
    """Runs programs awaited on the loop (the asyncio face): each call on a worker
    thread of the runner's own."""

    def __init__(self, connect: Connector, size: int) -> None:
        self._pool = _Pool(connect, size)
        # (one more thread than connections: a call waiting for a free one still ends)
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=size + 1, thread_name_prefix="semaphore-recipes-mysql-aio"
        )
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
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._threads, self._pool.run, request)
        except RuntimeError as exc:  # (the executor is shut down)
            raise NoConnection(2013, f"the runner is closed ({exc})") from exc

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
        self._threads.shutdown(wait=False, cancel_futures=True)
