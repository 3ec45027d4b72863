"""The client's session in MySQL: a row renewed by one thread, which also waits for notices.

Each backend keeps a row in ``sr_sessions`` whose expiry the *server's* clock sets and
the keeper renews every third of the session timeout, on a connection of its own that
holds the named lock ``sr.<session>`` (``GET_LOCK``). The server frees that lock when
the connection ends, so a client that crashed is dead for admissions after a short
grace (``IS_FREE_LOCK``), not only once its session expired.

MySQL has no LISTEN/NOTIFY. Between renewals the keeper's connection runs one waiting
statement (``sr_wait``: the session's notices, else a wait: ``SLEEP``, or ``GET_LOCK`` of
the named lock of a holder a waiter of ours depends on, which returns when that
holder's connection ends: its waiters look once the grace is over). An admission writes a
notice for each client it admitted and, once committed, interrupts that client's waiting
statement (``KILL QUERY`` of the connection holding its lock): one waiting connection per
process, whatever the number of its waiters, and one notice per admitted waiter.

The keeper's waiting statement can end late: MariaDB has held a ``SLEEP`` about 2 s past
its end while a ``KILL QUERY`` from another client was under way. When a wait overruns
so far that the renewal is a third of the session timeout late, a second thread renews
on the backend's background connection (``sr_renew`` only), so the session does not
expire because its keeper is stuck in a wait.

What users see: a failed renewal makes held permits SUSPENDED; a renewal that works
again makes them HELD (and every waiting entry looks once, since a wake sent meanwhile
may be lost); a session found expired, or a whole session timeout without a renewal,
makes them LOST, and waiters enter the queue again with a new session.
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

import pymysql

from ..backend import Program
from ..errors import SemaphoreError
from .wire import Connection, error_code

if TYPE_CHECKING:
    from .backend import MySQLBackend

log = logging.getLogger("semaphore_recipes.mysql")

#: how often a failed renewal or connect is tried again
RETRY_INTERVAL = 0.2
#: how long stop() waits for the thread
STOP_WAIT = 1.0
#: the error number of an interrupted statement (a wake)
INTERRUPTED = 1317
#: a timer this much earlier than the end of the current wait interrupts it
EARLY_TIMER = 0.05
#: a look after a holder's client is gone comes this long after its grace
GONE_MARGIN = 0.05


def new_session_id() -> str:
    return secrets.token_hex(8)


class SessionKeeper:
    """Renews the backend's session and waits for its notices, on one thread."""

    def __init__(self, backend: MySQLBackend) -> None:
        self.backend = backend
        self.timeout = backend.params.session_timeout
        self.listening = threading.Event()  # set once the lock is taken
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._pipe_closed = False
        self._thread = threading.Thread(
            target=self._run, name="semaphore-recipes-mysql-session", daemon=True
        )
        self._overrun_thread = threading.Thread(
            target=self._renew_past_overruns,
            name="semaphore-recipes-mysql-overrun",
            daemon=True,
        )
        self._conn: Connection | None = None
        self._suspended = False
        self._renew_now = False
        self._waiting_until = 0.0  # (monotonic) the end of the current server-side wait
        self._received = ""  # the seqs of the notices of the last answer, comma separated
        self._watched: str | None = None  # a holder's session whose end we wait for
        self._gone: set[str] = set()  # sessions whose clients' connections were seen end
        self._timers: list[tuple[float, int, Callable[[], Program[object]]]] = []
        self._timer_ids = itertools.count()
        self._timer_lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()
        self._overrun_thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke_local()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            if self._waiting_until > time.monotonic():
                with contextlib.suppress(SemaphoreError):
                    self.backend.background.run(self._poking())
            self._thread.join(STOP_WAIT)
        if (
            self._overrun_thread.is_alive()
            and self._overrun_thread is not threading.current_thread()
        ):
            self._overrun_thread.join(STOP_WAIT)
        if not self._thread.is_alive() and not self._pipe_closed:
            self._pipe_closed = True
            os.close(self._wake_r)
            os.close(self._wake_w)

    def wake(self) -> None:
        """Renew now (a statement found our session gone)."""
        self._renew_now = True
        self._poke_local()
        self._interrupt()

    def schedule(self, delay: float, program: Callable[[], Program[object]]) -> None:
        """Run ``program()`` on the background runner in ``delay`` seconds (a waiter's
        timed look)."""
        due = time.monotonic() + delay
        with self._timer_lock:
            heapq.heappush(self._timers, (due, next(self._timer_ids), program))
        self._poke_local()
        if due < self._waiting_until - EARLY_TIMER:
            self._interrupt()

    def watch(self, session: str) -> None:
        """A waiter of ours depends on ``session``'s holder: wait on its named lock
        (from the next wait on), to hear at once when its client's connection ends."""
        if session in self._gone or session in (self.backend.session, self._watched):
            return
        self._watched = session
        if self._waiting_until > time.monotonic():
            self._interrupt()  # (the current wait is a sleep, or on another session)

    # ---- waking the thread ---------------------------------------------------------------
    def _poke_local(self) -> None:
        """Wake the thread when it waits here (between connects), not on the server."""
        with contextlib.suppress(OSError):  # closed: the thread is over
            os.write(self._wake_w, b"x")

    def _interrupt(self) -> None:
        """Interrupt the keeper's statement on the server (from another connection)."""
        self.backend.in_background(self._poking)

    def _poking(self) -> Program[object]:
        backend = self.backend
        return backend.step("poke", ([backend.session],), backend.describe())

    # ---- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._serve()
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _serve(self) -> None:
        next_renewal = time.monotonic() + self.timeout / 3
        while not self._stop.is_set():
            conn = self._conn
            if conn is None:
                if not self._connect():  # (the first try at once: the lock's grace runs)
                    self._pause(RETRY_INTERVAL)
                    self._check_expiry()
                    continue
                next_renewal = 0.0  # at once: the session may have ended meanwhile
                continue
            try:
                now = time.monotonic()
                if now >= next_renewal or self._renew_now:
                    self._renew_now = False
                    self._renew(conn)
                    next_renewal = time.monotonic() + self.timeout / 3
                self._run_timers()
                due = min(next_renewal, self._next_timer())
                self._dispatch(self._wait(conn, max(due - time.monotonic(), 0.0)))
            except pymysql.err.MySQLError as exc:
                if not conn.broken:  # the server refused one call; the connection is fine
                    if error_code(exc) != INTERRUPTED:  # (a wake: the next wait reads)
                        log.info("mysql session %s: %s; trying again", self.backend.session, exc)
                        self._pause(RETRY_INTERVAL / 4)
                    continue  # (keeping the connection keeps the session's named lock)
                self._lost_connection(exc)

    def _renew_past_overruns(self) -> None:
        """While the keeper waits on the server past its renewal by a third of the
        session timeout, renew from here (the keeper's own renewal, once its wait ends,
        does the rest: a session found expired, holders checked)."""
        backend = self.backend
        while not self._stop.wait(self.timeout / 6):
            overdue = backend.lease.since_renewal() > self.timeout * 2 / 3
            if not overdue or not self._waiting_until:
                continue
            session = backend.session
            sent = time.monotonic()
            try:
                renewed = backend.background.run(
                    backend.step("renew", (session,), backend.describe())
                )
            except SemaphoreError as exc:
                log.info("mysql session %s: a renewal past the keeper's wait failed (%s)",
                         session, exc)  # fmt: skip
                continue
            if renewed == "1" and backend.session == session:
                backend.lease.renewed(sent)
                log.info("mysql session %s renewed while its keeper's wait ran late", session)

    def _wait(self, conn: Connection, seconds: float) -> list[list[object]]:
        """The session's notices: at once when there are some, else after a wait of at
        most ``seconds`` that a wake interrupts."""
        ms = int(seconds * 1000)
        backend = self.backend
        watched = self._watched or ""
        self._waiting_until = time.monotonic() + seconds
        try:
            reply = conn.call(
                "CALL sr_wait(%s, %s, %s, %s)",
                (backend.session, ms, watched, self._received),
                seconds + backend.request_timeout,
            )
        finally:
            self._waiting_until = 0.0
        answer = json.loads(reply or '[""]')
        assert isinstance(answer, list) and answer
        # (deleted on the server by the next call: an answer lost on the way comes again)
        self._received, notices = str(answer[0]), answer[1:]
        log.debug("mysql session %s: %d notice(s) after a wait of at most %.3f s (watching %s)",
                  backend.session, len(notices), seconds, watched or "none")  # fmt: skip
        return notices

    def _pause(self, seconds: float) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        if poller.poll(seconds * 1000):
            os.read(self._wake_r, 512)

    def _connect(self) -> bool:
        """Connect and take the session's lock; then (after a loss) renew and let waiters look."""
        backend = self.backend
        try:
            conn = backend.connect(backend.request_timeout)
        except pymysql.err.MySQLError as exc:
            self._suspend(exc)
            return False
        try:
            self._claim(conn)
        except pymysql.err.MySQLError as exc:
            conn.close()
            self._suspend(exc)
            return False
        self._conn = conn
        first = not self.listening.is_set()
        self.listening.set()
        if not first:
            log.info("%s: waiting for notices again", backend.describe())
            try:
                self._renew(conn)
            except pymysql.err.MySQLError as exc:
                if conn.broken:
                    self._lost_connection(exc)
                return True  # (else the loop renews at once)
            # a wake sent while we were away may be lost: every waiting entry looks once
            for queue in backend.queues():
                for entry_id in queue.waiting_entries():
                    self.schedule(0.0, functools.partial(queue.check, entry_id))
        return True

    def _claim(self, conn: Connection) -> None:
        backend = self.backend
        taken = conn.call("CALL sr_claim(%s)", (backend.session,), backend.request_timeout + 2)
        if taken != "1":
            raise pymysql.err.OperationalError(2013, "the session's lock is held elsewhere")

    def _call(self, conn: Connection, sql: str, *args: str | int) -> str | None:
        return conn.call(sql, args, self.backend.request_timeout)

    def _renew(self, conn: Connection) -> None:
        backend = self.backend
        session = backend.session
        sent = time.monotonic()
        if self._call(conn, "CALL sr_renew(%s)", session) == "1":
            if self._suspended:
                self._suspended = False
                log.info("mysql session %s renewed again: permits restored", session)
                backend.session_restored()
            backend.lease.renewed(sent)
            backend.check_holders(
                lambda name, key, token: int(
                    self._call(conn, "CALL sr_holder_exists(%s, %s, %s)", name, key, token) or 0
                )
            )
            return
        self._replace(conn, session, "the session expired on the server")

    def _replace(self, conn: Connection, old: str, why: str) -> None:
        backend = self.backend
        if backend.session != old:
            return
        new = new_session_id()
        sent = time.monotonic()
        self._call(conn, "CALL sr_open_session(%s, %s, %s, %s)", *backend.session_args(new))
        self._call(conn, "DO RELEASE_ALL_LOCKS()")
        backend.lease.restart(sent)
        self._suspended = False
        backend.session_ended(old, new, why)
        self._claim(conn)

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
            log.warning("mysql session %s: %s: permits suspended", self.backend.session, exc)
            self.backend.session_suspended()

    def _lost_connection(self, exc: BaseException) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._suspend(exc)
        self._check_expiry()

    def _dispatch(self, notices: list[list[object]]) -> None:
        for notice in notices:
            try:
                kind, semaphore, entry_id, capacity, version, *drain = notice
            except ValueError:
                log.warning("mysql: unreadable notice %r", notice)
                continue
            if kind == "gone":  # the watched holder's connection ended: look after the grace
                self._holder_gone(str(entry_id))
                continue
            if kind == "unwatchable":  # (it watches us: the timed looks find its end)
                self._gone.add(str(entry_id))
                if self._watched == entry_id:
                    self._watched = None
                continue
            if kind == "capacity":
                draining = drain[0] in (True, 1) if drain else None  # (with a drain flag change)
                for queue in self.backend.queues(str(semaphore)):
                    queue.apply_capacity(int(str(capacity)), int(str(version)), draining)
                continue
            for queue in self.backend.queues(str(semaphore)):
                if kind == "admitted":
                    queue.admitted(str(entry_id), int(str(capacity)), int(str(version)))
                elif kind == "deleted":
                    queue.deleted(str(entry_id))
                elif kind == "revoke":
                    queue.revoke_requested(str(entry_id))

    def _holder_gone(self, session: str) -> None:
        """Every waiting entry looks once the session's grace is over (it is dead for
        admissions then, unless its client reconnected meanwhile)."""
        self._gone.add(session)
        if self._watched == session:
            self._watched = None
        log.info("mysql: the client of session %s is gone; waiters look", session)
        delay = self.backend.params.orphan_grace + GONE_MARGIN
        for queue in self.backend.queues():
            for entry_id in queue.waiting_entries():
                self.schedule(delay, functools.partial(queue.check, entry_id))

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
                log.info("mysql: a waiter's look failed (%s)", exc)
