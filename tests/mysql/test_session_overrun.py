"""A keeper whose waiting statement ends late does not let its session expire.

MariaDB has held a keeper's ``SLEEP`` about 2 s past its end while a ``KILL QUERY`` from
another client was under way (seen in the contract suite under load: sessions "expired
on the server" with nothing else wrong). Here the wait is held up on purpose, by a table
lock on ``sr_notices`` (every wait reads it; a renewal does not), for 1.6 session
timeouts."""

from __future__ import annotations

import time
from typing import Any

import semaphore_recipes as sr
from semaphore_recipes.testing.mysql_harness import MySQLHarness
from semaphore_recipes.testing.polling import wait_until

SESSION = 3.0


def test_a_wait_held_up_past_the_session_timeout_keeps_the_session(
    mysql_harness: MySQLHarness, mysql_admin: Any, mysql_database: str
) -> None:
    backend = mysql_harness.connect(mysql_harness.url_with(session_timeout=SESSION))
    sem = backend.semaphore("overrun", capacity=1)
    permit = sem.acquire(timeout=10)
    session = mysql_harness.session_of(backend)
    with mysql_admin.cursor() as cursor:
        cursor.execute(f"USE `{mysql_database}`")
        cursor.execute("LOCK TABLES sr_notices WRITE")
        try:
            # the keeper's next wait blocks on the lock: its renewal is due meanwhile, and
            # the session would expire (shorter than the wait's read timeout, which
            # would end the connection: seconds + the request timeout, 5 s)
            time.sleep(1.6 * SESSION)
            assert permit.state is sr.PermitState.HELD
        finally:
            cursor.execute("UNLOCK TABLES")
    # once the wait ends the keeper renews as before: the same session, still held
    time.sleep(SESSION / 2)
    assert permit.state is sr.PermitState.HELD
    assert mysql_harness.session_of(backend) == session
    assert len(mysql_harness.entries("overrun")) == 1
    permit.release()
    wait_until(lambda: mysql_harness.entries("overrun") == [], timeout=5)
