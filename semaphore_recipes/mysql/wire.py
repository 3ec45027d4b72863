"""One MySQL connection (PyMySQL), each call bounded by its own deadline.

PyMySQL is blocking and pure Python; its timeouts are per connection. Each call here
first sets the connection's read and write timeouts to what is left of the caller's
bound (PyMySQL applies them to its socket at the next read or write), so a call never
waits longer than its bound, also when the server or the network goes silent. A
connection that failed, missed its bound or was interrupted is closed and never used
again: a late reply must not be read as another call's.

What a caller sees: ``pymysql.err.MySQLError`` (its ``args[0]`` the server's or the
driver's error number). PyMySQL raises OperationalError 2013 when a read timed out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pymysql
from pymysql.constants import CLIENT

__all__ = ["Connection", "error_code", "open_connection"]

#: the isolation every step's transaction runs at: each statement reads the latest commits
SESSION_SETUP = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
Arg = str | int | float | bytes | None
#: GROUP_CONCAT's limit on the library's connections (MySQL 8's default is 1 KiB)
GROUP_CONCAT_MAX = 64 * 1024 * 1024


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a driver's error (None for anything else)."""
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


class Connection:
    """A PyMySQL connection in autocommit mode, READ COMMITTED, whose calls each have
    a bound of their own."""

    def __init__(self, raw: pymysql.connections.Connection[Any]) -> None:
        self.raw = raw
        self.broken = False

    def call(self, sql: str, args: Sequence[Arg], timeout: float) -> str | None:
        """Run ``sql`` (``%s`` placeholders) within ``timeout`` seconds: the first
        column of its first row as text (None: no row or NULL); every further result
        (a procedure's) is read and dropped. Any failure but the server's own refusal
        leaves the connection broken."""
        self._bound(timeout)
        try:
            with self.raw.cursor() as cursor:
                cursor.execute(sql, tuple(args))
                row = cursor.fetchone()
                while cursor.nextset():
                    pass
        except pymysql.err.MySQLError as exc:
            code = error_code(exc)
            if code is None or code >= 2000 or not self.raw.open:  # (the driver's: 2xxx)
                self.broken = True
            raise
        except BaseException:
            self.broken = True
            raise
        if row is None or row[0] is None:
            return None
        value = row[0]
        return value.decode() if isinstance(value, bytes) else str(value)

    def _bound(self, timeout: float) -> None:
        # PyMySQL has no per-call timeout: it sets these on its socket when they change
        seconds = max(timeout, 0.001)
        raw: Any = self.raw
        raw._read_timeout = seconds
        raw._write_timeout = seconds

    def close(self) -> None:
        try:
            self.raw.close()
        except Exception:  # (already gone: nothing to tell the server)
            raw: Any = self.raw
            raw._force_close()


def open_connection(
    host: str,
    port: int,
    user: str | None,
    password: str | None,
    database: str,
    timeout: float,
    tls: dict[str, Any],
    lock_wait: int,
) -> Connection:
    """A new connection, set up within ``timeout`` seconds; InnoDB's lock waits end
    after ``lock_wait`` seconds (the caller retries within its own bound)."""
    raw = pymysql.connect(
        host=host,
        port=port,
        user=user or "",
        password=password or "",
        database=database,
        connect_timeout=max(timeout, 0.001),
        read_timeout=max(timeout, 0.001),
        write_timeout=max(timeout, 0.001),
        autocommit=True,
        charset="utf8mb4",
        client_flag=CLIENT.MULTI_RESULTS,
        **tls,
    )
    conn = Connection(raw)
    try:
        conn.call(SESSION_SETUP, (), timeout)
        conn.call(f"SET SESSION innodb_lock_wait_timeout = {int(lock_wait)}, "
                  f"group_concat_max_len = {GROUP_CONCAT_MAX}", (), timeout)  # fmt: skip
    except BaseException:
        conn.close()
        raise
    return conn


def json_arg(values: Sequence[object]) -> str:
    """A list as a procedure's JSON array argument."""
    return json.dumps(list(values), separators=(",", ":"))
