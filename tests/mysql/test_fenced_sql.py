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
from semaphore_recipes.mysql import fenced_connection
from semaphore_recipes.testing.mysql_harness import MySQLHarness
from semaphore_recipes.testing.workers import Workers

from .user_guide_example import pay

SESSION = 2  # the paused holder's session timeout (s)


def fetch(admin: Any, sql: str) -> Any:
    with admin.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()


@pytest.fixture
def accounts(mysql_harness: MySQLHarness, mysql_admin: Any, mysql_database: str) -> str:
    """The caller's own table, ``accounts``, beside the library's."""
    table = f"`{mysql_database}`.accounts"
    with mysql_admin.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, balance INT, last_token BIGINT) "
            "ENGINE=InnoDB"
        )
        cursor.execute(f"INSERT INTO {table} VALUES (1, 100, 0)")
    return table


def test_a_paused_holders_update_is_refused_after_a_new_holder_wrote(
    mysql_harness: MySQLHarness, mysql_admin: Any, accounts: str
) -> None:
    harness = mysql_harness
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.mysql.fenced_holder",
         harness.url_with(session_timeout=SESSION)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        old_token = int(Workers.expect(holder, "HELD").split()[1])
        holder.send_signal(signal.SIGSTOP)  # paused past its session
        sem = harness.connect().semaphore("accounts", capacity=1)
        started = time.monotonic()
        pay(sem, account_id=1, amount=10)  # granted once the paused holder's session ran out
        assert time.monotonic() - started < SESSION + 5
        holder.send_signal(signal.SIGCONT)
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert Workers.expect(holder, "", timeout=15) == "REFUSED"
        balance, last_token = fetch(mysql_admin, f"SELECT balance, last_token FROM {accounts}")
        assert balance == 90 and last_token > old_token  # the new holder's write, and only it
        assert holder.wait(10) == 0
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait()


def test_a_grant_that_needs_a_dead_holders_entry_gone_waits_for_its_fenced_commit(
    mysql_harness: MySQLHarness, mysql_admin: Any, accounts: str
) -> None:
    """The fence locks the entry: the admission that deletes it (its session expired
    meanwhile) waits for the holder's commit, so the next holder comes after it."""
    harness = mysql_harness
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
        with conn.cursor() as cursor:
            cursor.execute(f"UPDATE {accounts} SET balance = 0, last_token = %s", (permit.token,))
        committed = time.monotonic()
    waiter.join(20)
    assert granted and granted[0][0] >= committed
    assert fetch(mysql_admin, f"SELECT balance FROM {accounts}") == (0,)
    granted[0][1].release()


def test_a_fenced_transaction_rolls_back_when_its_block_raises(
    mysql_harness: MySQLHarness, mysql_admin: Any, accounts: str
) -> None:
    sem = mysql_harness.connect().semaphore("accounts", capacity=1)
    with (
        sem.acquire() as permit,
        pytest.raises(RuntimeError),
        fenced_connection(permit) as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute(f"UPDATE {accounts} SET balance = 1")
        raise RuntimeError("the caller's own failure")
    assert fetch(mysql_admin, f"SELECT balance FROM {accounts}") == (100,)
