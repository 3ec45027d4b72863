"""The PostgreSQL backend: ``postgresql://user:password@host:port/dbname?schema=S``.

The semaphores live in tables of one schema (:mod:`.schema`), made on first use when
the role may (else ``semaphore-recipes sql-schema`` prints them for a migration tool).
Each protocol step is one statement calling a function that decides in the database,
with the semaphore's row locked: FIFO in commit order, weighted head-of-line admission,
one round trip for an uncontended acquire and one for a release. The sync face runs the
steps on blocking connections, the asyncio face on the loop: the same programs
(:mod:`.runner`, :mod:`.wire`). One thread per backend renews its session and listens
for the notifications that admit its waiters (:mod:`.session`).

On connection loss: held permits are SUSPENDED while the session may still be alive,
HELD again when a renewal works, LOST once a session timeout passed without one or the
session is found expired; waiters then enter the queue again with a new session.
``close()`` ends the session: its entries go at once and the next holders are admitted.

Honest limits (docs/operations.md): use the primary (``target_session_attrs=read-write``
with several hosts) and a direct connection or session pooling (PgBouncer's transaction
pooling breaks LISTEN); a failover to an asynchronous standby can lose recent grants.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, TypeVar

from ..backend import (
    RESTORED,
    SUSPENDED,
    Backend,
    Capabilities,
    Deadline,
    Enqueued,
    FencedTransaction,
    Program,
    QueueDriver,
    ServiceURL,
    SessionState,
    Waiter,
    default_owner,
    run_program,
    session_lost,
    validate_name,
)
from ..errors import AcquireTimeout, BackendUnavailable, PermissionDenied, SemaphoreError
from . import multi
from .params import DEFAULT_PORT, PostgreSQLParams
from .queue import PostgreSQLQueue
from .runner import AsyncRunner, Pause, SchemaMissing, SyncRunner, call
from .schema import SCHEMA_VERSION, schema_sql
from .session import SessionKeeper, new_session_id
from .transaction import PostgreSQLFencedTransaction
from .wire import Param, bytea_array, text_array

log = logging.getLogger("semaphore_recipes.postgresql")

__all__ = ["PostgreSQLBackend"]

T = TypeVar("T")
#: connections a backend's runner opens at most (waiters hold none while they wait)
POOL_SIZE = 4


class PostgreSQLBackend(Backend):
    """Semaphores in one PostgreSQL database (its primary), over one session row."""

    scheme = "postgresql"
    capabilities = Capabilities(
        async_face=True, slots=True, acquire_all=True, server_admission=True
    )
    queue_type = PostgreSQLQueue
    default_port = DEFAULT_PORT

    def __init__(self, params: PostgreSQLParams, *, owner: str | None = None) -> None:
        super().__init__(owner=owner or default_owner(), request_timeout=params.request_timeout)
        self.params = params
        self.conninfo = params.conninfo()
        self.session = new_session_id()
        self.sync = SyncRunner(self.conninfo, params.connect_timeout, POOL_SIZE)
        self.aio: AsyncRunner | None = None
        #: the keeper's runner: waiters' timed looks, removals retried
        self.background = SyncRunner(self.conninfo, params.connect_timeout, 1)
        self.keeper = SessionKeeper(self)
        self._queues: dict[str, weakref.WeakSet[PostgreSQLQueue]] = {}
        self._state_lock = threading.Lock()
        self._state = SessionState.CONNECTED
        self._closed = False
        self._reported_lost: str | None = None  # the session whose end was told
        self._retries = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="semaphore-recipes-postgresql-bg"
        )
        self._ids = itertools.count()

    # ---- made from a URL -------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> PostgreSQLBackend:
        """A backend for a ``postgresql://`` URL: ValueError before any I/O,
        BackendUnavailable when the server does not answer within ``connect_timeout``,
        AuthenticationFailed when it refuses, PermissionDenied when the schema is
        missing and the role may not make it."""
        backend = cls(PostgreSQLParams.from_url(url), owner=owner)
        try:
            backend.sync.run(backend._opening())
            backend._start()
        except BaseException:
            backend._shut()
            raise
        return backend

    @classmethod
    async def from_url_async(
        cls, url: ServiceURL, *, owner: str | None = None
    ) -> PostgreSQLBackend:
        backend = cls(PostgreSQLParams.from_url(url), owner=owner)
        backend.aio = AsyncRunner(backend.conninfo, backend.params.connect_timeout, POOL_SIZE)
        try:
            await backend.aio.run(backend._opening())
            backend.keeper.start()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, backend._await_listening)
        except BaseException:
            backend._shut()
            raise
        return backend

    def _opening(self) -> Program[None]:
        """Check (or make) the schema, then open the session: within connect_timeout."""
        bound = Deadline(self.params.connect_timeout, time.monotonic)
        where = self.describe()
        try:
            version = yield from self._call(
                "SELECT max(version) FROM {s}.schema_version", (), where, bound
            )
        except SchemaMissing:
            version = None
        if version is None:
            yield from self._making_schema(bound)
        elif int(version) > SCHEMA_VERSION:
            raise BackendUnavailable(
                f"{where}: the schema is version {version}, newer than this release "
                f"knows ({SCHEMA_VERSION}): upgrade semaphore-recipes"
            )
        yield from self._call(
            "SELECT {s}.open_session($1, $2, $3, $4)", self.session_args(self.session), where, bound
        )

    def _making_schema(self, bound: Deadline) -> Program[None]:
        schema = self.params.schema
        script = (
            "BEGIN; SELECT pg_advisory_xact_lock(hashtext('semaphore_recipes schema "
            f"{schema}')); {schema_sql(schema)} COMMIT;"
        )
        try:
            yield from call(script.encode(), None, where=self.describe(), bound=bound,
                            request_timeout=bound.cap(self.params.connect_timeout),
                            user=self.params.user)  # fmt: skip
        except PermissionDenied as exc:
            raise PermissionDenied(
                "postgresql",
                self.params.user,
                self.describe(),
                f"the schema {schema!r} is missing and this role may not make it ({exc}); "
                f"run `semaphore-recipes sql-schema --schema {schema}` as its owner "
                "(docs/operations.md)",
            ) from exc
        log.info("%s: made the schema (version %d)", self.describe(), SCHEMA_VERSION)

    def _start(self) -> None:
        self.keeper.start()
        self._await_listening()

    def _await_listening(self) -> None:
        if not self.keeper.listening.wait(self.params.connect_timeout):
            raise BackendUnavailable(f"{self.describe()}: could not LISTEN in time")
        log.info("%s: session %s", self.describe(), self.session)

    # ---- statements ------------------------------------------------------------------------
    def sql(self, template: str) -> bytes:
        """``template`` with ``{s}`` the schema, as libpq takes it."""
        return _with_schema(template, self.params.schema).encode()

    def _call(
        self, template: str, params: Sequence[Param], where: str, bound: Deadline
    ) -> Program[str | None]:
        return call(self.sql(template), params, where=where, bound=bound,
                    request_timeout=self.request_timeout, user=self.params.user,
                    opening=True)  # fmt: skip

    def statement(
        self,
        template: str,
        params: Sequence[Param],
        where: str,
        *,
        deadline: Deadline | None = None,
        retry: bool = True,
    ) -> Program[str | None]:
        """A program running one statement (:func:`.runner.call`): bounded by a waiting
        acquire's ``deadline`` (AcquireTimeout), else by the request timeout."""
        bound = deadline or Deadline(self.request_timeout, time.monotonic)
        return call(self.sql(template), params, where=where, bound=bound,
                    request_timeout=self.request_timeout, waiting=deadline is not None,
                    retry=retry, user=self.params.user)  # fmt: skip

    text_array = staticmethod(text_array)
    bytea_array = staticmethod(bytea_array)

    def session_args(self, session: str) -> tuple[str, str, str, str]:
        """The parameters of ``open_session`` for ``session``."""
        ms = str(int(self.params.session_timeout * 1000))
        return session, self.owner, self.keeper.channel, ms

    def transaction_options(self) -> dict[str, Any]:
        """psycopg.connect's options for a fenced transaction's connection."""
        ms = int(self.params.session_timeout * 1000)
        return {"options": f"-c idle_in_transaction_session_timeout={ms}"}

    def new_entry_id(self) -> str:
        """An entry id of the current session, never given twice by this backend."""
        return f"{self.session}.{next(self._ids)}"

    # ---- running programs: the runner --------------------------------------------------------
    def run(self, program: Program[T]) -> T:
        refusal = self.refusal()
        if refusal is not None:
            return run_program(program, _answering(refusal))
        return self.sync.run(program)

    async def run_async(self, program: Program[T]) -> T:
        refusal = self.refusal()
        if refusal is not None:
            return run_program(program, _answering(refusal))
        assert self.aio is not None, "the asyncio face's calls need from_url_async"
        return await self.aio.run(program)

    def in_background(self, program: Callable[[], Program[Any]]) -> None:
        """Run ``program()`` on the background runner, tried again until it works or
        the session is over (a removal: the session's end removes the entry anyway)."""
        session = self.session

        def attempt() -> None:
            while not self._closed and self.session == session:
                try:
                    self.background.run(program())
                    return
                except SemaphoreError as exc:
                    log.info("postgresql background write failed (%s); trying again", exc)
                    time.sleep(0.5)

        with contextlib.suppress(RuntimeError):  # closed: the session's end removes the rest
            self._retries.submit(attempt)

    def removal(
        self, what: str, first: Program[Any], again: Callable[[], Program[Any]]
    ) -> Program[bool]:
        """Run the removal ``first`` (``what``) within the request timeout: True once
        applied. Not confirmed in time, or interrupted: ``again()`` in the background
        (a removal repeats harmlessly), and an interrupt goes on."""
        try:
            yield from first
        except BackendUnavailable as exc:
            if not self._closed:
                log.warning("%s failed (%s); retrying", what, exc)
                self.in_background(again)
            return False
        except Exception:
            raise
        except BaseException:
            self.in_background(again)
            raise
        return True

    def await_new_session(self, old: str, deadline: Deadline) -> Program[None]:
        """Wait (within ``deadline``) until the keeper replaced the session ``old``."""
        self.keeper.wake()
        while self.session == old:
            self.check_open()
            if deadline.expired():
                raise AcquireTimeout(f"{self.describe()}: no new session in time")
            yield Pause(deadline.cap(0.05))

    def queues(self, name: str | None = None) -> list[PostgreSQLQueue]:
        """The open queues (of semaphore ``name``)."""
        with self._state_lock:
            if name is not None:
                return list(self._queues.get(name, ()))
            return [q for found in self._queues.values() for q in found]

    # ---- the session, as the keeper finds it -----------------------------------------------
    def session_suspended(self) -> None:
        with self._state_lock:
            if self._state is not SessionState.CONNECTED:
                return
            self._state = SessionState.SUSPENDED
        self.publish(SUSPENDED)

    def session_restored(self) -> None:
        with self._state_lock:
            if self._state is not SessionState.SUSPENDED:
                return
            self._state = SessionState.CONNECTED
        self.publish(RESTORED)

    def session_ended(self, old: str, new: str | None, why: str) -> None:
        """The session ``old`` is over (``new`` replaces it, once made): permits are
        LOST, waiters with entries of ``old`` enter the queue again."""
        with self._state_lock:
            tell = self._reported_lost != old
            self._reported_lost = old
            if new is not None:
                self.session = new
                self._state = SessionState.CONNECTED
            else:
                self._state = SessionState.EXPIRED
        if tell:
            log.warning("postgresql session %s ended: %s", old, why)
            self.publish(session_lost(f"the postgresql session ended: {why}"))
            self.requeue_waiters(
                lambda entry_id: entry_id is not None and entry_id.startswith(old + ".")
            )
        if new is not None:
            log.info("%s: new session %s", self.describe(), new)

    def check_holders(self, execute: Callable[[bytes, tuple[str, ...]], str | None]) -> None:
        """After a renewal: report watched holder entries that are gone."""
        sql = self.sql(
            "SELECT count(*) FROM {s}.entries WHERE semaphore = $1 AND id = $2 "
            "AND token = $3 AND {s}.live(session)"
        )
        for queue in self.queues():

            def exists(key: str, token: int, name: str = queue.name) -> bool:
                return execute(sql, (name, key, str(token))) == "1"

            queue.check_holders(exists)

    # ---- Backend ---------------------------------------------------------------------------
    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[QueueDriver]:
        queue = PostgreSQLQueue(self, name)
        with self._state_lock:
            self._queues.setdefault(name, weakref.WeakSet()).add(queue)
        return queue.open(capacity, adopt_capacity=adopt_capacity, create=create)

    def enqueue_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> Program[dict[str, Enqueued]]:
        return multi.enqueue_all(self, queues, deadline)

    def delete_all(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> Program[None]:
        return multi.delete_all(self, queues)

    def transaction_all(
        self, entries: Sequence[tuple[QueueDriver, str]], token: int
    ) -> FencedTransaction:
        return PostgreSQLFencedTransaction(self, [(q.name, k) for q, k in entries], token)

    def describe(self) -> str:
        return self.params.describe()

    @property
    def session_state(self) -> SessionState:
        with self._state_lock:
            return SessionState.CLOSED if self._closed else self._state

    def refusal(self) -> BackendUnavailable | None:
        if self._closed:
            return BackendUnavailable(f"the backend of {self.describe()} is closed")
        return None

    def check_open(self) -> None:
        refusal = self.refusal()
        if refusal is not None:
            raise refusal

    def reading(self, key: str) -> Program[bytes | None]:
        value = yield from self.statement(
            "SELECT encode(value, 'hex') FROM {s}.data WHERE key = $1", (key,), self.describe()
        )
        return None if value is None else bytes.fromhex(value)

    def data_key(self, semaphore: str, name: str = "data") -> str:
        return f"{validate_name(semaphore)}/{validate_name(name)}"

    def deleting_semaphore(self, name: str) -> Program[None]:
        yield from self.statement("SELECT {s}.delete_semaphore($1)", (name,), self.describe())

    def _ending(self) -> Program[None]:
        yield from self.statement("SELECT {s}.end_session($1)", (self.session,), self.describe())

    def _closing(self) -> bool:
        with self._state_lock:
            if self._closed:
                return False
            self._closed = True
        return True

    def close(self) -> None:
        """End the session (its entries go; waiters of others are admitted at once)
        and stop the keeper; idempotent. Within the request timeout: when the server
        does not answer, the session expires after the session timeout."""
        if not self._closing():
            return
        self.keeper.stop()  # (first: it must not find the session ended and replace it)
        try:
            self.sync.run(self._ending())
        except SemaphoreError as exc:
            log.warning("%s: closing: %s", self.describe(), exc)
        self._shut()
        self.fail("the postgresql backend was closed")

    async def close_async(self) -> None:
        if not self._closing():
            return
        assert self.aio is not None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.keeper.stop)
        try:
            await self.aio.run(self._ending())
        except SemaphoreError as exc:
            log.warning("%s: closing: %s", self.describe(), exc)
        self._shut()
        self.fail("the postgresql backend was closed")

    def _shut(self) -> None:
        self._closed = True
        self.keeper.stop()
        self._retries.shutdown(wait=False, cancel_futures=True)
        for runner in (self.sync, self.background, self.aio):
            if runner is not None:
                runner.close()


@lru_cache(maxsize=256)
def _with_schema(template: str, schema: str) -> str:
    return template.replace("{s}", schema)


def _answering(refusal: BackendUnavailable) -> Callable[[object], object]:
    def answer(request: object) -> object:
        raise refusal

    return answer
