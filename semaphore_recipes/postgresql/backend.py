"""The PostgreSQL backend: ``postgresql://user:password@host:port/dbname?schema=S``.

The semaphores live in tables of one schema (:mod:`.schema`), made on first use when
the role may, and upgraded on connect when an older release made them (else
``semaphore-recipes sql-schema`` prints them for a migration tool).
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
import logging
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from ..backend import Capabilities, Deadline, Program, ServiceURL, default_owner
from ..errors import BackendUnavailable, PermissionDenied
from ..sql.requests import StepArg
from ..sql.store import SQLBackend
from .params import DEFAULT_PORT, PostgreSQLParams
from .runner import AsyncRunner, SchemaMissing, SyncRunner, call
from .schema import SCHEMA_VERSION, schema_sql
from .session import SessionKeeper, new_session_id
from .transaction import PostgreSQLFencedTransaction
from .wire import Param, bytea_array, text_array

log = logging.getLogger("semaphore_recipes.postgresql")

__all__ = ["PostgreSQLBackend"]

#: connections a backend's runner opens at most (waiters hold none while they wait)
POOL_SIZE = 4


class PostgreSQLBackend(SQLBackend):
    """Semaphores in one PostgreSQL database (its primary), over one session row."""

    scheme = "postgresql"
    capabilities = Capabilities(
        async_face=True,
        slots=True,
        acquire_all=True,
        server_admission=True,
        drain=True,
        ramp=True,
        revoke=True,
    )
    default_port = DEFAULT_PORT
    keeper: SessionKeeper

    def __init__(self, params: PostgreSQLParams, *, owner: str | None = None) -> None:
        super().__init__(
            owner=owner or default_owner(),
            request_timeout=params.request_timeout,
            session=new_session_id(),
            session_timeout=params.session_timeout,
        )
        self.params = params
        self.conninfo = params.conninfo()
        self.sync = SyncRunner(self.conninfo, params.connect_timeout, POOL_SIZE)
        #: the keeper's runner: waiters' timed looks, removals retried
        self.background = SyncRunner(self.conninfo, params.connect_timeout, 1)
        self.keeper = SessionKeeper(self)

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
            backend.shut()
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
            backend.shut()
            raise
        return backend

    def _opening(self) -> Program[None]:
        """Check (or make, or upgrade) the schema, then open the session: within
        connect_timeout."""
        bound = Deadline(self.params.connect_timeout, time.monotonic)
        where = self.describe()
        try:
            version = yield from self._call(
                "SELECT max(version) FROM {s}.schema_version", (), where, bound
            )
        except SchemaMissing:
            version = None
        if version is None:
            yield from self._making_schema(bound, None)
        elif int(version) > SCHEMA_VERSION:
            raise BackendUnavailable(
                f"{where}: the schema is version {version}, newer than this release "
                f"knows ({SCHEMA_VERSION}): upgrade semaphore-recipes"
            )
        elif int(version) < SCHEMA_VERSION:
            yield from self._making_schema(bound, int(version))
        self.lease.restart(time.monotonic())  # (sent now: the server's expiry is later)
        yield from self._call(
            "SELECT {s}.open_session($1, $2, $3, $4)", self.session_args(self.session), where, bound
        )

    def _making_schema(self, bound: Deadline, found: int | None) -> Program[None]:
        """Make the schema, or upgrade it from version ``found``: the script is
        idempotent (its functions replaced, tables made if missing), run by one client
        at a time (an advisory lock), and records :data:`SCHEMA_VERSION`."""
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
            state = (
                f"the schema {schema!r} is missing"
                if found is None
                else f"the schema {schema!r} is version {found}, older than this "
                f"release's ({SCHEMA_VERSION}),"
            )
            raise PermissionDenied(
                "postgresql",
                self.params.user,
                self.describe(),
                f"{state} and this role may not {'make' if found is None else 'upgrade'} "
                f"it ({exc}); run `semaphore-recipes sql-schema --schema {schema}` as its "
                "owner (docs/operations.md)",
            ) from exc
        if found is None:
            log.info("%s: made the schema (version %d)", self.describe(), SCHEMA_VERSION)
        else:
            log.info("%s: upgraded the schema from version %d to %d", self.describe(), found,
                     SCHEMA_VERSION)  # fmt: skip

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

    def session_args(self, session: str) -> tuple[str, str, str, str]:
        """The parameters of ``open_session`` for ``session``."""
        ms = str(int(self.params.session_timeout * 1000))
        return session, self.owner, self.keeper.channel, ms

    def transaction_options(self) -> dict[str, Any]:
        """psycopg.connect's options for a fenced transaction's connection."""
        ms = int(self.params.session_timeout * 1000)
        return {"options": f"-c idle_in_transaction_session_timeout={ms}"}

    def step(
        self,
        name: str,
        args: Sequence[StepArg],
        where: str,
        *,
        deadline: Deadline | None = None,
        retry: bool = True,
    ) -> Program[str | None]:
        """``SELECT <schema>.<name>($1, ...)``: lists become arrays, flags ``t``/``f``."""
        placeholders = ", ".join(f"${i}" for i in range(1, len(args) + 1))
        return self.statement(
            f"SELECT {{s}}.{name}({placeholders})",
            [_param(arg) for arg in args],
            where,
            deadline=deadline,
            retry=retry,
        )

    def fenced_transaction(
        self, entries: Sequence[tuple[str, str]], token: int
    ) -> PostgreSQLFencedTransaction:
        return PostgreSQLFencedTransaction(self, entries, token)

    def stop_keeper(self) -> None:
        self.keeper.stop()

    def capacities(self) -> Program[str | None]:
        return self.statement(
            "SELECT coalesce(json_agg(json_build_array(name, capacity)), '[]')::text "
            "FROM {s}.semaphores",
            [],
            self.describe(),
        )

    def holder_state(
        self, execute: Callable[[bytes, tuple[str, ...]], str | None]
    ) -> Callable[[str, str, int], int]:
        """After a renewal (on the keeper's connection): is a watched holder entry there
        (1), with a revoke request (2), or gone (0)? (A request whose notification was
        lost, the listener reconnecting, is seen here.)"""
        sql = self.sql(
            "SELECT coalesce(max(CASE WHEN revoke_requested THEN 2 ELSE 1 END), 0) "
            "FROM {s}.entries WHERE semaphore = $1 AND id = $2 "
            "AND token = $3 AND {s}.live(session)"
        )
        return lambda name, key, token: int(execute(sql, (name, key, str(token))) or 0)

    # ---- Backend ---------------------------------------------------------------------------
    def describe(self) -> str:
        return self.params.describe()

    def reading(self, key: str) -> Program[bytes | None]:
        value = yield from self.statement(
            "SELECT encode(value, 'hex') FROM {s}.data WHERE key = $1", (key,), self.describe()
        )
        return None if value is None else bytes.fromhex(value)


@lru_cache(maxsize=256)
def _with_schema(template: str, schema: str) -> str:
    return template.replace("{s}", schema)


def _param(arg: StepArg) -> Param:
    """A step's argument as libpq takes it (text; arrays in their text form)."""
    if arg is None or isinstance(arg, (str, bytes)):
        return arg
    if isinstance(arg, bool):
        return "t" if arg else "f"
    if isinstance(arg, int):
        return str(arg)
    items: list[object] = list(arg)
    if all(isinstance(item, str) for item in items):
        return text_array([str(item) for item in items])
    if all(isinstance(item, bytes) for item in items):
        return bytea_array([item for item in items if isinstance(item, bytes)])
    return "{" + ",".join(str(item) for item in items) + "}"
