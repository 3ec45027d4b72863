"""Waiting without polling: one waiting connection per client process, and a release that
interrupts exactly the clients it admits, however many wait."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.mysql_harness import MySQLHarness
from semaphore_recipes.testing.polling import wait_until


def status(admin: Any, name: str) -> int:
    with admin.cursor() as cursor:
        cursor.execute(f"SHOW GLOBAL STATUS LIKE '{name}'")
        return int(cursor.fetchone()[1])


def settled(admin: Any, name: str) -> int:
    """The counter ``name`` once it stopped moving (the waiters' keepers have taken up
    the holder to watch: each interrupts its own wait once for it)."""
    last = status(admin, name)
    while True:
        time.sleep(0.2)
        now = status(admin, name)
        if now == last:
            return now
        last = now


def our_connections(admin: Any, database: str) -> int:
    with admin.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE db = %s", (database,)
        )
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("waiting", [5, 40])
def test_a_release_wakes_only_the_client_it_admits(
    mysql_harness: MySQLHarness, mysql_admin: Any, mysql_database: str, waiting: int
) -> None:
    holder = mysql_harness.connect().semaphore("wake", capacity=1)
    permit = holder.acquire()
    clients = [mysql_harness.connect() for _ in range(2)]
    granted: list[sr.Permit] = []
    lock = threading.Lock()

    def wait(client: sr.Client) -> None:
        got = client.semaphore("wake", capacity=1).acquire(timeout=60)
        with lock:
            granted.append(got)

    threads = [threading.Thread(target=wait, args=(clients[i % 2],)) for i in range(waiting)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(holder.status().waiters) == waiting, timeout=20)
    connections = our_connections(mysql_admin, mysql_database)
    kills = settled(mysql_admin, "Com_kill")
    permit.release()
    wait_until(lambda: len(granted) == 1, timeout=10)
    # one client admitted, one interrupt; the other client's keeper slept on
    assert status(mysql_admin, "Com_kill") - kills == 1
    # (each client: its keeper, a pool bounded by POOL_SIZE, a background connection)
    assert connections <= 3 * (1 + 4 + 1)
    while len(granted) < waiting:
        with lock:
            last = granted[-1]
        count = len(granted)
        last.release()
        wait_until(lambda: len(granted) > count, timeout=10)  # noqa: B023 (waited for here)
    granted[-1].release()
    for thread in threads:
        thread.join(10)
