"""The MySQL harness's reading verbs, on tables made here as the backend makes them: an
entry counts while its session's ``expires_at`` is ahead of the server's clock, and so
do its job slot records."""

from __future__ import annotations

from typing import Any

from semaphore_recipes.testing.mysql_harness import MySQLHarness, live_mysql_entries

#: the columns the harness reads, of the backend's tables
TABLES = (
    "CREATE TABLE sr_semaphores (name VARCHAR(128) PRIMARY KEY, capacity INT, version INT)",
    "CREATE TABLE sr_sessions (id VARCHAR(128) PRIMARY KEY, owner TEXT, timeout_ms INT, "
    "expires_at DATETIME(6) NOT NULL)",
    "CREATE TABLE sr_entries (semaphore VARCHAR(128), id VARCHAR(128), "
    "session VARCHAR(128), PRIMARY KEY (semaphore, id))",
    "CREATE TABLE sr_slots (semaphore VARCHAR(128), idx INT, entry VARCHAR(128), "
    "PRIMARY KEY (semaphore, idx))",
)


def _run(admin: Any, sql: str) -> None:
    with admin.cursor() as cursor:
        cursor.execute(sql)


def test_entries_and_sessions_are_the_live_ones(
    mysql_harness: MySQLHarness, mysql_admin: Any, mysql_database: str
) -> None:
    assert mysql_harness.entries() == []  # no tables yet: nothing connected
    assert mysql_harness.sessions() == set()
    assert mysql_harness.semaphores() == []
    _run(mysql_admin, f"USE `{mysql_database}`")
    for create in TABLES:
        _run(mysql_admin, create)
    _run(mysql_admin, "INSERT INTO sr_semaphores VALUES ('a', 1, 1), ('b', 2, 1)")
    _run(
        mysql_admin,
        "INSERT INTO sr_sessions VALUES "
        "('00000000000000ff', 'w', 4000, SYSDATE(6) + INTERVAL 1 HOUR), "
        "('00000000000000ee', 'w', 4000, '1970-01-02')",
    )
    _run(
        mysql_admin,
        "INSERT INTO sr_entries VALUES ('a', 'e1', '00000000000000ff'), "
        "('b', 'e2', '00000000000000ff'), ('a', 'e3', '00000000000000ee')",
    )
    # job slot records are listed with their live entry's, as the other harnesses do
    _run(mysql_admin, "INSERT INTO sr_slots VALUES ('a', 0, 'e3'), ('a', 1, 'e1')")
    assert mysql_harness.entries() == [
        f"{mysql_database}/a/e1",
        f"{mysql_database}/a/slots/1",
        f"{mysql_database}/b/e2",
    ]
    assert mysql_harness.entries("b") == [f"{mysql_database}/b/e2"]
    assert live_mysql_entries(mysql_admin, mysql_database, "c") == []
    assert mysql_harness.sessions() == {0xFF}
    assert mysql_harness.semaphores() == ["a", "b"]
    # what an expiry leaves is no leftover at teardown
    _run(mysql_admin, "UPDATE sr_sessions SET expires_at = '1970-01-02'")
    assert mysql_harness.entries() == []
