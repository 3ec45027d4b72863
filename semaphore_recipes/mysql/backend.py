"""The MySQL/MariaDB backend: ``mysql://user:password@host:port/dbname?session_timeout=S``.

The semaphores live in ``sr_*`` tables of the URL's database (:mod:`.schema`), made on
first use when the user may, and upgraded on connect when an older release made them
(else ``semaphore-recipes sql-schema --dialect mysql`` prints them for a migration
tool). Each protocol step is one ``CALL`` of a procedure
that decides in the database, in a transaction of its own, with the semaphore's row
locked: FIFO in commit order, weighted head-of-line admission, one round trip for an
uncontended acquire and one for a release. Deadlock aborts and lock wait timeouts are
sent again within the caller's deadline. The driver is PyMySQL (pure Python): the sync
face calls it on the calling thread, the asyncio face on worker threads of the backend
(:mod:`.runner`). One thread per backend renews its session and waits for the notices
that admit its waiters (:mod:`.session`).

On connection loss: held permits are SUSPENDED while the session may still be alive,
HELD again when a renewal works, LOST once a session timeout passed without one or the
session is found expired; waiters then enter the queue again with a new session. A
client whose session connection is gone (a crash: the server frees its named lock) is
dead for admissions after a grace of at most a second. ``close()`` ends the session: its
entries go at once and the next holders are admitted.

Honest limits (docs/operations.md): use the primary; a failover to an asynchronous
replica can lose recent grants; NDB has no ``GET_LOCK``; waking waiters needs the right
to ``KILL QUERY`` the clients' connections (the same user, or CONNECTION ADMIN).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import pymysql

from ..backend import Capabilities, Deadline, Program, ServiceURL, default_owner
from ..errors import BackendUnavailable, PermissionDenied
from ..sql.requests import StepArg
from ..sql.store import SQLBackend
from .params import DEFAULT_PORT, MySQLParams
from .runner import AsyncRunner, SchemaMissing, SyncRunner, call, translate
from .schema import SCHEMA_VERSION, schema_statements
from .session import SessionKeeper, new_session_id
from .transaction import MySQLFencedTransaction
from .wire import Arg, Connection, error_code, json_arg, open_connection

log = logging.getLogger("semaphore_recipes.mysql")

__all__ = ["MySQLBackend"]

#: connections a backend's runner opens at most (waiters hold none while they wait)
POOL_SIZE = 4


class MySQLBackend(SQLBackend):
    """Semaphores in one MySQL or MariaDB database, over one session row."""

    scheme = "mysql"
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

    def __init__(self, params: MySQLParams, *, owner: str | None = None) -> None:
        super().__init__(
            owner=owner or default_owner(),
            request_timeout=params.request_timeout,
            session=new_session_id(),
            session_timeout=params.session_timeout,
        )
        self.params = params
        self.sync = SyncRunner(self.connect, POOL_SIZE)
        #: the keeper's runner: waiters' timed looks, wakes, removals retried
        self.background = SyncRunner(self.connect, 1)
        self.keeper = SessionKeeper(self)

    def connect(self, timeout: float) -> Connection:
        """A new connection of this backend, set up within ``timeout`` seconds."""
        p = self.params
        lock_wait = max(1, math.ceil(self.request_timeout))
        return open_connection(
            p.host, p.port, p.user, p.password, p.database, timeout, p.tls, lock_wait
        )

    # ---- made from a URL -------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> MySQLBackend:
        """A backend for a ``mysql://`` URL: ValueError before any I/O,
        BackendUnavailable when the server does not answer within ``connect_timeout``,
        AuthenticationFailed when it refuses, PermissionDenied when the tables are
        missing and the user may not make them."""
        backend = cls(MySQLParams.from_url(url), owner=owner)
        try:
            backend._open()
            backend._await_listening()
        except BaseException:
            backend.shut()
            raise
        return backend

    @classmethod
    async def from_url_async(cls, url: ServiceURL, *, owner: str | None = None) -> MySQLBackend:
        backend = cls(MySQLParams.from_url(url), owner=owner)
        backend.aio = AsyncRunner(backend.connect, POOL_SIZE)
        try:
            await asyncio.to_thread(backend._open)
            await asyncio.to_thread(backend._await_listening)
        except BaseException:
            backend.shut()
            raise
        return backend

    def _open(self) -> None:
        """Check (or make, or upgrade) the schema, open the session and start the keeper: within
        ``connect_timeout``."""
        bound = Deadline(self.params.connect_timeout, time.monotonic)
        where = self.describe()
        try:
            conn = self.connect(left(bound))
        except pymysql.err.MySQLError as exc:
            raise translate(exc, where, self.params.user) from exc
        try:
            try:
                version = conn.call(
                    "SELECT MAX(version) FROM sr_schema_version",
                    (),
                    left(bound),
                )
            except pymysql.err.MySQLError as exc:
                if not isinstance(translate(exc, where, None), SchemaMissing):
                    raise
                version = None
            if version is not None and int(version) > SCHEMA_VERSION:
                raise BackendUnavailable(
                    f"{where}: the schema is version {version}, newer than this release "
                    f"knows ({SCHEMA_VERSION}): upgrade semaphore-recipes"
                )
            if version is None or int(version) < SCHEMA_VERSION:
                self._make_schema(conn, bound, None if version is None else int(version))
            self.lease.restart(time.monotonic())  # (sent now: the server's expiry is later)
            conn.call("CALL sr_open_session(%s, %s, %s, %s)", self.session_args(self.session),
                      left(bound))  # fmt: skip
        except pymysql.err.MySQLError as exc:
            raise translate(exc, where, self.params.user) from exc
        finally:
            conn.close()
        self.keeper.start()

    def _make_schema(self, conn: Connection, bound: Deadline, found: int | None) -> None:
        """The tables and procedures, made (or upgraded from version ``found``: the
        statements are idempotent, each procedure dropped and made again) by one client
        at a time (a named lock); they record :data:`SCHEMA_VERSION`."""
        lock = f"sr_schema.{self.params.database}"
        taken = conn.call("SELECT GET_LOCK(%s, %s)", (lock, max(1, int(left(bound)))),
                          left(bound) + 1)  # fmt: skip
        if taken != "1":
            raise BackendUnavailable(f"{self.describe()}: another client is making the schema")
        try:
            made = conn.call("SELECT COUNT(*) FROM information_schema.tables WHERE "
                             "table_schema = DATABASE() AND table_name = 'sr_schema_version'",
                             (), left(bound))  # fmt: skip
            if made == "1":
                # (another client may have made or upgraded it while we waited for the lock)
                now = conn.call("SELECT MAX(version) FROM sr_schema_version", (), left(bound))
                if now is not None and int(now) >= SCHEMA_VERSION:
                    return
            for statement in schema_statements():
                conn.call(statement, (), left(bound))
        except pymysql.err.MySQLError as exc:
            if error_code(exc) in (1142, 1044, 1227, 1370, 1419):
                state = (
                    "the library's tables are missing and this user may not make them"
                    if found is None
                    else f"the library's schema is version {found}, older than this "
                    f"release's ({SCHEMA_VERSION}), and this user may not upgrade it"
                )
                raise PermissionDenied(
                    "mysql",
                    self.params.user,
                    self.describe(),
                    f"{state} ({exc}); run `semaphore-recipes sql-schema --dialect mysql` in "
                    "the database as its owner (docs/operations.md)",
                ) from exc
            raise
        finally:
            conn.call("SELECT RELEASE_LOCK(%s)", (lock,), left(bound) + 1)
        if found is None:
            log.info("%s: made the schema (version %d)", self.describe(), SCHEMA_VERSION)
        else:
            log.info("%s: upgraded the schema from version %d to %d", self.describe(), found,
                     SCHEMA_VERSION)  # fmt: skip

    def _await_listening(self) -> None:
        if not self.keeper.listening.wait(self.params.connect_timeout):
            raise BackendUnavailable(f"{self.describe()}: the session's keeper did not start")
        log.info("%s: session %s", self.describe(), self.session)

    # ---- steps -----------------------------------------------------------------------------
    def step(
        self,
        name: str,
        args: Sequence[StepArg],
        where: str,
        *,
        deadline: Deadline | None = None,
        retry: bool = True,
    ) -> Program[str | None]:
        """``CALL sr_<name>(...)``: lists become JSON arrays (byte strings in hex)."""
        bound = deadline or Deadline(self.request_timeout, time.monotonic)
        if name == "remove" and len(args[1]) == 1:  # type: ignore[arg-type]
            # (one entry, a release's: the procedure without the lists, half the work)
            sems, eids, session, sweep = args
            name, args = "remove_one", (sems[0], eids[0], session, sweep)  # type: ignore[index]
        placeholders = ", ".join(["%s"] * len(args))
        return call(f"CALL sr_{name}({placeholders})", [_arg(arg) for arg in args],
                    where=where, bound=bound, request_timeout=self.request_timeout,
                    waiting=deadline is not None, retry=retry,
                    user=self.params.user)  # fmt: skip

    def session_args(self, session: str) -> tuple[str, str, int, int]:
        """The arguments of ``sr_open_session`` for ``session``."""
        ms = int(self.params.session_timeout * 1000)
        return session, self.owner, ms, int(self.params.orphan_grace * 1000)

    def fenced_transaction(
        self, entries: Sequence[tuple[str, str]], token: int
    ) -> MySQLFencedTransaction:
        return MySQLFencedTransaction(self, entries, token)

    def stop_keeper(self) -> None:
        self.keeper.stop()

    def capacities(self) -> Program[str | None]:
        return call(
            "SELECT COALESCE(JSON_ARRAYAGG(JSON_ARRAY(name, capacity)), '[]') FROM sr_semaphores",
            [],
            where=self.describe(),
            bound=Deadline(self.request_timeout, time.monotonic),
            request_timeout=self.request_timeout,
            user=self.params.user,
        )

    # ---- Backend ---------------------------------------------------------------------------
    def describe(self) -> str:
        return self.params.describe()

    def reading(self, key: str) -> Program[bytes | None]:
        value = yield from self.step("read", (key,), self.describe())
        return None if value is None else bytes.fromhex(value)


def left(bound: Deadline) -> float:
    """What is left of an opening's bound (its deadline is connect_timeout away)."""
    return max(bound.remaining() or 0.0, 0.001)


def _arg(arg: StepArg) -> Arg:
    """A step's argument as the procedure takes it."""
    if arg is None or isinstance(arg, (str, int)):
        return int(arg) if isinstance(arg, bool) else arg
    if isinstance(arg, bytes):
        return arg
    items: list[Any] = [item.hex() if isinstance(item, bytes) else item for item in arg]
    return json_arg(items)
