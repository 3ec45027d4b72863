"""``take_slot``'s answers, and a take that meets another taker's uncommitted record: at
READ COMMITTED a missing row locks nothing, so the insert decides, and the loser gets a
fresh listing (never a duplicate key)."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg


def test_a_take_against_an_uncommitted_one_answers_with_the_listing(
    postgresql_backend: Any, postgresql_admin: psycopg.Connection[Any], postgresql_schema: str
) -> None:
    s = postgresql_schema
    sql = f"SELECT {s}.take_slot('seats', %s, %s)"

    def take(conn: psycopg.Connection[Any], entry: str, index: int) -> Any:
        row = conn.execute(sql, (entry, index)).fetchone()
        assert row is not None
        return json.loads(row[0])

    sem = postgresql_backend().semaphore("seats", capacity=2)
    with sem.acquire(), sem.acquire():
        rows = postgresql_admin.execute(
            f"SELECT id FROM {s}.entries WHERE semaphore = 'seats' ORDER BY token"
        ).fetchall()
        a, b = (entry for (entry,) in rows)
        first = take(postgresql_admin, a, 0)
        assert first[0] == "ok"
        assert take(postgresql_admin, a, 0) == first  # a retry after a lost reply adopts it
        assert take(postgresql_admin, b, 0) == ["taken", [0]]
        with psycopg.connect(postgresql_admin.info.dsn) as other:  # (a transaction open)
            assert take(other, b, 1)[0] == "ok"  # b's take of 1, not committed yet
            answers: list[Any] = []
            racing = threading.Thread(target=lambda: answers.append(take(postgresql_admin, a, 1)))
            racing.start()
            racing.join(0.5)
            assert racing.is_alive()  # a's insert waits for b's commit
            other.commit()
            racing.join(5)
        assert answers == [["taken", [0, 1]]]
    assert take(postgresql_admin, a, 0) == ["lost"]
