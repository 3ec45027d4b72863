"""Fenced writes to the caller's own tables: SQL that commits only while the permit is held."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.postgresql import fenced_connection
from semaphore_recipes.testing.postgresql_harness import PostgreSQLHarness
from semaphore_recipes.testing.workers import Workers

from .user_guide_example import pay

SESSION = 2  # the paused holder's session timeout (s)


@pytest.fixture
def accounts(postgresql_harness: PostgreSQLHarness, postgresql_admin: Any) -> Iterator[str]:
    """The caller's own table, ``public.accounts`` (as the user guide's example names it)."""
    postgresql_admin.execute("DROP TABLE IF EXISTS public.accounts")
    postgresql_admin.execute(
        "CREATE TABLE public.accounts (id int PRIMARY KEY, balance int, last_token bigint)"
    )
    postgresql_admin.execute("INSERT INTO public.accounts VALUES (1, 100, 0)")
    yield "public.accounts"
    postgresql_admin.execute("DROP TABLE public.accounts")


def test_a_paused_holders_update_is_refused_after_a_new_holder_wrote(
    postgresql_harness: PostgreSQLHarness, postgresql_admin: Any, accounts: str
) -> None:
    harness = postgresql_harness
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.postgresql.fenced_holder",
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
        row = postgresql_admin.execute(f"SELECT balance, last_token FROM {accounts}").fetchone()
        assert row[0] == 90 and row[1] > old_token  # the new holder's write, and only it
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
        conn.execute(f"UPDATE {accounts} SET balance = 0, last_token = %s", (permit.token,))
        committed = time.monotonic()
    waiter.join(20)
    assert granted and granted[0][0] >= committed
    assert postgresql_admin.execute(f"SELECT balance FROM {accounts}").fetchone() == (0,)
    granted[0][1].release()
