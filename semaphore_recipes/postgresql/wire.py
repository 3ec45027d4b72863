"""One statement on libpq's asynchronous interface, as a program both faces run.

The protocol's steps reach PostgreSQL through libpq (psycopg's ``pq`` module, which
``psycopg[binary]`` ships with its own libpq) in non-blocking mode: connecting and
running a statement are generators that yield :class:`Readable` or :class:`Writable`
(wait until the socket is ready, at most until a deadline) and are driven by the
blocking runner (``select``) or the asyncio one (the loop's readers). So every wait is
bounded by the caller's deadline, also when the server or the network goes silent, and
no statement is written twice.

What a caller sees: :class:`StatementError` when the server answered with an error (its
SQLSTATE), ``psycopg.OperationalError`` when the connection failed (then it is
discarded: a late reply must never be read as another statement's), and
:class:`NoReply` when the deadline passed first (also discarded).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import pq

from ..backend import Program

__all__ = [
    "ConnectRefused",
    "NoReply",
    "NothingListens",
    "Readable",
    "StatementError",
    "Writable",
    "bytea_array",
    "connecting",
    "executing",
    "notifications",
    "text_array",
]

Param = str | bytes | None


@dataclass(frozen=True)
class Readable:
    """Wait until ``fd`` is readable; NoReply once ``deadline`` (monotonic) passes."""

    fd: int
    deadline: float


@dataclass(frozen=True)
class Writable:
    """Wait until ``fd`` is writable; NoReply once ``deadline`` passes."""

    fd: int
    deadline: float


class NoReply(psycopg.OperationalError):
    """No reply before the deadline: the connection is discarded."""


class ConnectRefused(psycopg.OperationalError):
    """The server answered a connect with a refusal that trying again will not change
    (no such role or database, authentication, pg_hba.conf)."""


#: what a server says when it refuses a connection for now (it is starting, stopping,
#: recovering, or full): worth trying again
_REFUSED_FOR_NOW = (
    "starting up",
    "shutting down",
    "recovery mode",
    "too many clients",
    "not yet accepting connections",
    "not accepting connections",
)


class NothingListens(psycopg.OperationalError):
    """Every host of the URL refused the TCP connection (nothing listens there)."""


def _connect_failure(conn: pq.abc.PGconn) -> psycopg.OperationalError:
    message = _message(conn)
    if message.count("failed:") == message.count("Connection refused") > 0:
        return NothingListens(message)
    if "FATAL:" in message and not any(now in message for now in _REFUSED_FOR_NOW):
        return ConnectRefused(message)
    return psycopg.OperationalError(message)


class StatementError(Exception):
    """The server refused a statement: ``sqlstate`` (its error code) and its message."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def connecting(conninfo: str, timeout: float) -> Program[pq.abc.PGconn]:
    """Open a connection within ``timeout`` seconds (libpq tries each host of the URL
    in turn)."""
    at = time.monotonic() + timeout
    conn = pq.PGconn.connect_start(conninfo.encode())
    try:
        while True:
            if conn.status == pq.ConnStatus.BAD:
                raise _connect_failure(conn)
            state = conn.connect_poll()
            if state == pq.PollingStatus.OK:
                break
            if state == pq.PollingStatus.FAILED:
                raise _connect_failure(conn)
            if state == pq.PollingStatus.READING:
                yield Readable(conn.socket, at)
            else:
                yield Writable(conn.socket, at)
        conn.nonblocking = 1
        return conn
    except BaseException:
        conn.finish()
        raise


def executing(
    conn: pq.abc.PGconn, sql: bytes, params: Sequence[Param] | None, timeout: float
) -> Program[str | None]:
    """Run ``sql`` with text parameters (None: several statements, no parameters), its
    reply awaited at most ``timeout`` seconds: the first column of the first row of the
    last result that has one (None for none, or NULL). Not prepared: a statement's
    first run on a connection must be the one request that reaches the server (a
    PREPARE whose reply is lost would leave the statement unsent)."""
    at = time.monotonic() + timeout
    if params is None:
        conn.send_query(sql)
    else:
        conn.send_query_params(sql, [p.encode() if isinstance(p, str) else p for p in params])
    return (yield from _results(conn, at))


def _results(conn: pq.abc.PGconn, at: float) -> Program[str | None]:
    """Flush what was sent, then read every result up to the end of the reply."""
    while conn.flush():
        yield Writable(conn.socket, at)
    first: str | None = None
    error: StatementError | None = None
    while True:
        conn.consume_input()
        while not conn.is_busy():
            result = conn.get_result()
            if result is None:
                if error is not None:
                    raise error
                return first
            if result.status == pq.ExecStatus.FATAL_ERROR:
                sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
                message = (result.error_message or b"").decode(errors="replace").strip()
                error = error or StatementError(sqlstate, message)
            elif result.ntuples and result.nfields:
                value = result.get_value(0, 0)
                first = None if value is None else value.decode()
        yield Readable(conn.socket, at)


def notifications(conn: pq.abc.PGconn) -> list[tuple[str, str]]:
    """The notifications received so far on a listening connection: (channel, payload)."""
    conn.consume_input()
    found = []
    while (notify := conn.notifies()) is not None:
        found.append((notify.relname.decode(), notify.extra.decode()))
    return found


def text_array(items: Sequence[str]) -> str:
    """A text[] literal of ``items`` (a parameter in text format)."""
    quoted = ('"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"' for item in items)
    return "{" + ",".join(quoted) + "}"


def bytea_array(items: Sequence[bytes]) -> str:
    """A bytea[] literal of ``items`` (hex format)."""
    return "{" + ",".join(f'"\\\\x{item.hex()}"' for item in items) + "}"


def _message(conn: pq.abc.PGconn) -> str:
    return conn.error_message.decode(errors="replace").strip() or "connection failed"
