"""The client's session in PostgreSQL: a row renewed by one thread, which also listens.

PostgreSQL has no sessions of the kind a semaphore needs, so each backend keeps a row
in ``<schema>.sessions`` whose expiry the *server's* clock sets (``clock_timestamp()`` +
the session timeout) and the keeper renews every third of the timeout. Every admission
treats an entry whose session expired as gone (and deletes it), so a crashed
client's permits return within the session timeout, as seen by the next admission of
its semaphores: a waiter times a look for when another session could expire.

The same thread owns the backend's one listening connection (``LISTEN`` on the
backend's channel): an admission notifies exactly the clients whose entries it
admitted, and the keeper hands each notification to its queue. The renewal runs on that
connection, so a connection that is cut is noticed by the renewal that fails.

What users see: a failed renewal makes held permits SUSPENDED; a renewal that works
again makes them HELD (and every waiting entry looks once, since notifications sent
meanwhile are lost); a session found expired, or a whole session timeout without a
renewal, makes them LOST, and waiters enter the queue again with a new session.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import json
import logging
import os
import secrets
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg
from psycopg import pq

from ..backend import Program, run_program
from ..errors import SemaphoreError
from .runner import wait_blocking
from .schema import capacity_channel
from .wire import StatementError, connecting, executing, notifications

if TYPE_CHECKING:
    from .backend import PostgreSQLBackend

log = logging.getLogger("semaphore_recipes.postgresql")

#: how often a failed renewal or connect is tried again
RETRY_INTERVAL = 0.2
#: how long stop() waits for the thread
STOP_WAIT = 1.0


def new_session_id() -> str:
    return secrets.token_hex(8)


class SessionKeeper:
    """Renews the backend's session and listens on its channel, on one thread."""

    def __init__(self, backend: PostgreSQLBackend) -> None:
        self.backend = backend
        self.timeout = backend.params.session_timeout
        self.channel = f"sr_{secrets.token_hex(8)}"
        self.listening = threading.Event()  # set once LISTEN took effect
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._pipe_closed = False
        self._thread = threading.Thread(
            target=self._run, name="semaphore-recipes-postgresql-session", daemon=True
        )
        self._conn: pq.abc.PGconn | None = None
        self._suspended = False
        self._timers: list[tuple[float, int, Callable[[], Program[object]]]] = []
        self._timer_ids = itertools.count()
        self._timer_lock = threading.Lock()

    @property
    def backend_pid(self) -> int | None:
        """The server process of the listening connection (None while there is none)."""
        conn = self._conn
        return None if conn is None else conn.backend_pid

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT)
        if not self._thread.is_alive() and not self._pipe_closed:
            self._pipe_closed = True
            os.close(self._wake_r)
            os.close(self._wake_w)

    def wake(self) -> None:
        """Renew now (a statement found our session gone)."""
        self._renew_now = True
        self._poke()

    def _poke(self) -> None:
        """Wake the thread (a timer to run, a renewal asked for, or stop)."""
        with contextlib.suppress(OSError):  # closed: the thread is over
            os.write(self._wake_w, b"x")

    def schedule(self, delay: float, program: Callable[[], Program[object]]) -> None:
        """Run ``program()`` on this thread's connection in ``delay`` seconds (a
        waiter's timed look)."""
        with self._timer_lock:
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_ids), program))
        self._poke()  # (its timer may come before the next renewal: not a renewal itself)

    def watch(self, session: str) -> None:
        """(PostgreSQL cannot tell a client's end apart from a reconnect: the timed
        looks find a crashed holder, docs/design.md section 11.)"""

    # ---- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._serve()
        finally:
            if self._conn is not None:
                self._conn.finish()
                self._conn = None

    def _serve(self) -> None:
        next_renewal = time.monotonic() + self.timeout / 3
        while not self._stop.is_set():
            conn = self._conn
            if conn is None:
                if not self._connect():
                    self._pause(RETRY_INTERVAL)
                    self._check_expiry()
                    continue
                next_renewal = 0.0  # at once: the session may have ended meanwhile
                continue
            now = time.monotonic()
            due = min(next_renewal, self._next_timer())
            if due > now:
                self._wait(conn, due - now)
            if self._stop.is_set():
                return
            try:
                self._dispatch(notifications(conn))
                if time.monotonic() >= next_renewal or self._renew_now:
                    self._renew_now = False
                    self._renew(conn)
                    next_renewal = time.monotonic() + self.timeout / 3
                self._run_timers()
            except (psycopg.OperationalError, StatementError) as exc:
                self._lost_connection(exc)

    _renew_now = False  # wake() asked for a renewal

    def _wait(self, conn: pq.abc.PGconn, seconds: float) -> None:
        """Wait for a notification, a wake-up or ``seconds``."""
        poller = select.poll()
        poller.register(conn.socket, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        for fd, _ in poller.poll(seconds * 1000):
            if fd == self._wake_r:
                os.read(self._wake_r, 512)

    def _pause(self, seconds: float) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        if poller.poll(seconds * 1000):
            os.read(self._wake_r, 512)

    def _connect(self) -> bool:
        """Connect and LISTEN; then (after a loss) renew and let waiters look."""
        backend = self.backend
        try:
            conn = run_program(connecting(backend.conninfo, backend.request_timeout), wait_blocking)
        except psycopg.OperationalError as exc:
            self._suspend(exc)
            return False
        try:
            self._execute(conn, f'LISTEN "{self.channel}"'.encode(), ())
            self._execute(conn, f'LISTEN "{capacity_channel(backend.params.schema)}"'.encode(), ())
        except (psycopg.OperationalError, StatementError) as exc:
            conn.finish()
            self._suspend(exc)
            return False
        self._conn = conn
        first = not self.listening.is_set()
        self.listening.set()
        if not first:
            log.info("%s: listening again on %s", backend.describe(), self.channel)
            try:
                self._renew(conn)
            except (psycopg.OperationalError, StatementError) as exc:
                self._lost_connection(exc)
                return True
            # notifications sent while we were not listening are lost: look once
            for queue in backend.queues():
                for entry_id in queue.waiting_entries():
                    self.schedule(0.0, functools.partial(queue.check, entry_id))
        return True

    def _execute(self, conn: pq.abc.PGconn, sql: bytes, params: tuple[str, ...]) -> str | None:
        return run_program(
            executing(conn, sql, params, self.backend.request_timeout), wait_blocking
        )

    def _renew(self, conn: pq.abc.PGconn) -> None:
        backend = self.backend
        session = backend.session
        sent = time.monotonic()
        renewed = self._execute(conn, backend.sql("SELECT {s}.renew($1)"), (session,))
        if renewed == "t":
            if self._suspended:
                self._suspended = False
                log.info("postgresql session %s renewed again: permits restored", session)
                backend.session_restored()
            backend.lease.renewed(sent)
            backend.check_holders(backend.holder_state(lambda sql, p: self._execute(conn, sql, p)))
            return
        self._replace(conn, session, "the session expired on the server")

    def _replace(self, conn: pq.abc.PGconn, old: str, why: str) -> None:
        backend = self.backend
        if backend.session != old:
            return
        new = new_session_id()
        sent = time.monotonic()
        self._execute(conn, backend.sql("SELECT {s}.open_session($1, $2, $3, $4)"),
                      backend.session_args(new))  # fmt: skip
        backend.lease.restart(sent)
        self._suspended = False
        backend.session_ended(old, new, why)

    def _check_expiry(self) -> None:
        """No renewal for a whole session timeout: the server has expired the session,
        or will before we could say otherwise."""
        if self.backend.lease.lapsed():
            why = "no renewal for a whole session timeout"
            self.backend.session_ended(self.backend.session, None, why)

    def _suspend(self, exc: BaseException) -> None:
        if self._stop.is_set():
            return
        if not self._suspended:
            self._suspended = True
            log.warning("postgresql session %s: %s: permits suspended", self.backend.session, exc)
            self.backend.session_suspended()

    def _lost_connection(self, exc: BaseException) -> None:
        if self._conn is not None:
            self._conn.finish()
            self._conn = None
        self._suspend(exc)
        self._check_expiry()

    def _dispatch(self, received: list[tuple[str, str]]) -> None:
        for _, payload in received:
            try:
                message = json.loads(payload)
                kind, semaphore, entry_id, capacity, version, *drain = message
            except ValueError:
                log.warning("postgresql: unreadable notification %r", payload)
                continue
            if kind == "capacity":  # (on the schema's channel: entry_id is the schema)
                if entry_id == self.backend.params.schema:
                    draining = bool(drain[0]) if drain else None  # (with a drain flag change)
                    for queue in self.backend.queues(semaphore):
                        queue.apply_capacity(int(capacity), int(version), draining)
                continue
            for queue in self.backend.queues(semaphore):
                if kind == "admitted":
                    queue.admitted(entry_id, int(capacity), int(version))
                elif kind == "deleted":
                    queue.deleted(entry_id)
                elif kind == "revoke":
                    queue.revoke_requested(entry_id)

    def _next_timer(self) -> float:
        with self._timer_lock:
            return self._timers[0][0] if self._timers else float("inf")

    def _run_timers(self) -> None:
        while True:
            with self._timer_lock:
                if not self._timers or self._timers[0][0] > time.monotonic():
                    return
                _, _, program = heapq.heappop(self._timers)
            try:
                self.backend.background.run(program())
            except SemaphoreError as exc:
                log.info("postgresql: a waiter's look failed (%s)", exc)
