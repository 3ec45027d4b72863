"""``sr_take_slot``'s answers, and a take that meets another taker's uncommitted record:
the loser gets a fresh listing, one JSON array inside the reply (never a duplicate key:
under churn the insert decides, as the shipped slot contract checks)."""

from __future__ import annotations

import json
import threading
from typing import Any

from semaphore_recipes.mysql.wire import SESSION_SETUP


def _connect(server: Any, database: str, *, autocommit: bool) -> Any:
    """A root connection at READ COMMITTED, as the backend's (the procedures' reads see
    the latest commits only there)."""
    import pymysql

    host, port = server.host_port.rsplit(":", 1)
    conn = pymysql.connect(host=host, port=int(port), user="root", database=database,
                           autocommit=autocommit)  # fmt: skip
    with conn.cursor() as cursor:
        cursor.execute(SESSION_SETUP)
    return conn


def _take(conn: Any, entry: str, index: int) -> Any:
    with conn.cursor() as cursor:
        cursor.execute("CALL sr_take_slot('seats', %s, %s)", (entry, index))
        (reply,) = cursor.fetchone()
        while cursor.nextset():
            pass
        return json.loads(reply)


def test_a_take_against_an_uncommitted_one_answers_with_the_listing(
    mysql_backend: Any, mysql_server: Any, mysql_database: str
) -> None:
    sem = mysql_backend().semaphore("seats", capacity=2)
    taker = _connect(mysql_server, mysql_database, autocommit=True)
    other = _connect(mysql_server, mysql_database, autocommit=False)
    try:
        with sem.acquire(), sem.acquire():
            with taker.cursor() as cursor:
                cursor.execute("SELECT id FROM sr_entries WHERE semaphore = 'seats' ORDER BY token")
                a, b = (entry for (entry,) in cursor.fetchall())
            first = _take(taker, a, 0)
            assert first[0] == "ok"
            assert _take(taker, a, 0) == first  # a retry after a lost reply adopts it
            assert _take(taker, b, 0) == ["taken", [0]]
            other.begin()
            with other.cursor() as cursor:  # b's record of index 1, not committed yet
                cursor.execute("INSERT INTO sr_slots VALUES ('seats', 1, %s, 0)", (b,))
            answers: list[Any] = []
            racing = threading.Thread(target=lambda: answers.append(_take(taker, a, 1)))
            racing.start()
            racing.join(0.5)
            assert racing.is_alive()  # a's take waits for b's commit
            other.commit()
            racing.join(5)
            assert answers == [["taken", [0, 1]]]
        assert _take(taker, a, 0) == ["lost"]
    finally:
        taker.close()
        other.close()
