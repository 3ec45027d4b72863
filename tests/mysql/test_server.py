"""The MariaDB launcher and the plugin's fixtures: a real server with a row-based binary
log, whose data survives a crash and a restart, leaving nothing behind."""

from __future__ import annotations

import os
from typing import Any

import pymysql
import pytest

from semaphore_recipes.devtools.mysql_server import MariaDBServer


def _connect(host_port: str, database: str | None = None) -> Any:
    host, port = host_port.rsplit(":", 1)
    return pymysql.connect(host=host, port=int(port), user="root", database=database,
                           autocommit=True)  # fmt: skip


def _rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def test_the_session_server_logs_rows_and_gives_each_test_a_database(
    mysql_server: Any, mysql_admin: Any, mysql_database: str, mysql_url: str
) -> None:
    assert _rows(mysql_admin, "SELECT @@binlog_format, @@log_bin") == [("ROW", 1)]
    assert len(mysql_database) <= 64 and mysql_database.startswith("sr_")
    assert mysql_url == (
        f"mysql://root@{mysql_server.host_port}/{mysql_database}?session_timeout=4"
    )
    with _connect(mysql_server.host_port, mysql_database) as conn:
        assert _rows(conn, "SELECT DATABASE()") == [(mysql_database,)]


def test_a_server_keeps_its_port_and_data_across_a_crash_and_a_restart() -> None:
    server = MariaDBServer().start()
    workdir, port = server.workdir, server.port
    try:
        assert server.url() == f"mysql://root@127.0.0.1:{port}/semaphore_recipes"
        assert server.url("d", session_timeout="4").endswith("/d?session_timeout=4")
        with _connect(server.host_port) as conn:
            _rows(conn, "CREATE DATABASE kept")
            _rows(conn, "CREATE TABLE kept.t (v INT PRIMARY KEY) ENGINE=InnoDB")
            _rows(conn, "INSERT INTO kept.t VALUES (7)")
        server.kill()  # a crash: InnoDB recovers at the next start
        assert not server.running
        server.start()
        with _connect(server.host_port) as conn:
            assert _rows(conn, "SELECT v FROM kept.t") == [(7,)]
            _rows(conn, "INSERT INTO kept.t VALUES (8)")
        server.restart()  # a clean shutdown (SIGTERM), then a start
        assert server.port == port
        with _connect(server.host_port) as conn:
            assert _rows(conn, "SELECT v FROM kept.t ORDER BY v") == [(7,), (8,)]
            assert _rows(conn, "SELECT @@binlog_format, @@log_bin") == [("ROW", 1)]
            # the binary log, one file a start, has the row written before the crash
            logs = [name for name, *_ in _rows(conn, "SHOW BINARY LOGS")]
            assert len(logs) == 3
            events = [row for log in logs for row in _rows(conn, f"SHOW BINLOG EVENTS IN '{log}'")]
            assert any(row[2] == "Table_map" and row[5].endswith("(kept.t)") for row in events)
            assert any(row[2].startswith("Write_rows") for row in events)
        pid = server.pid
    finally:
        server.close()
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not workdir.exists()
