"""Fenced writes to the caller's own tables: SQL that commits only while the permit is held."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.postgresql import fenced_connection
from semaphore_recipes.testing.postgresql_harness import PostgreSQLHarness
from semaphore_recipes.testing.workers import Workers

SESSION = 2  # the paused holder's session timeout (s)


@pytest.fixture
def accounts(postgresql_harness: PostgreSQLHarness, postgresql_admin: Any) -> str:
    """The caller's own table (in the test's schema, dropped with it)."""
    postgresql_harness.connect().close()  # the schema exists from here on
    table = f"{postgresql_harness.schema}.accounts"
    postgresql_admin.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, owner text, token bigint)")
    postgresql_admin.execute(f"INSERT INTO {table} VALUES (1, 'nobody', 0)")
    return table


def test_a_paused_holders_update_is_refused_after_a_new_holder_wrote(
    postgresql_harness: PostgreSQLHarness, postgresql_admin: Any, accounts: str
) -> None:
    harness = postgresql_harness
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.postgresql.fenced_holder",
         harness.url_with(session_timeout=SESSION), harness.schema],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        old_token = int(Workers.expect(holder, "HELD").split()[1])
        holder.send_signal(signal.SIGSTOP)  # paused past its session
        sem = harness.connect().semaphore("accounts", capacity=1)
        with sem.acquire(timeout=SESSION + 5) as permit:
            assert permit.token > old_token
            with fenced_connection(permit) as conn:
                conn.execute(
                    f"UPDATE {accounts} SET owner = 'new', token = %s WHERE id = 1",
                    (permit.token,),
                )
            holder.send_signal(signal.SIGCONT)
            assert holder.stdin is not None
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert Workers.expect(holder, "", timeout=15) == "REFUSED"
        row = postgresql_admin.execute(f"SELECT owner, token FROM {accounts}").fetchone()
        assert row == ("new", permit.token)
        assert holder.wait(10) == 0
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait()


def test_a_grant_that_needs_a_dead_holders_entry_gone_waits_for_its_fenced_commit(
    postgresql_harness: PostgreSQLHarness, postgresql_admin: Any, accounts: str
) -> None:
    """The fence locks the entry: the admission that deletes it (its session expired
    meanwhile) waits for the holder's commit, so the next holder comes after it."""
    harness = postgresql_harness
    old = harness.connect()
    permit = old.semaphore("accounts", capacity=1).acquire()
    granted: list[tuple[float, sr.Permit]] = []

    def wait() -> None:
        permit = harness.connect().semaphore("accounts", capacity=1).acquire(timeout=15)
        granted.append((time.monotonic(), permit))

    waiter = threading.Thread(target=wait)
    with fenced_connection(permit) as conn:
        harness.expire_session(old)  # its entry is dead for every admission from now
        waiter.start()
        time.sleep(0.5)
        assert not granted, "granted while the dead holder's fenced transaction was open"
        conn.execute(
            f"UPDATE {accounts} SET owner = 'old', token = %s WHERE id = 1", (permit.token,)
        )
        committed = time.monotonic()
    waiter.join(20)
    assert granted and granted[0][0] >= committed
    assert postgresql_admin.execute(f"SELECT owner FROM {accounts}").fetchone() == ("old",)
    granted[0][1].release()
