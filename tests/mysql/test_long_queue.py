"""``status()`` of a semaphore with a long queue (found by the benchmarks' herd at W=1000).

``sr_status`` builds its reply in a ``TEXT`` variable (at most 65,535 bytes): a queue
whose JSON is longer (some 600 entries) makes the step fail with error 1406, "Data too
long for column 'reply'", which the backend reports as BackendUnavailable.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

from semaphore_recipes.errors import SemaphoreError
from semaphore_recipes.testing.mysql_harness import MySQLHarness

WAITERS = 1000


def waiting(admin: Any, database: str) -> int:
    with admin.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{database}`.sr_entries WHERE held = 0")
        return int(cursor.fetchone()[0])


@pytest.mark.xfail(
    strict=True, reason="sr_status's reply is a TEXT variable: 64 KiB of JSON at most"
)
def test_status_lists_a_queue_of_a_thousand_waiters(
    mysql_harness: MySQLHarness, mysql_admin: Any, mysql_database: str
) -> None:
    backend = mysql_harness.connect()
    semaphore = backend.semaphore("long", capacity=1)
    holder = semaphore.acquire(timeout=10)

    def wait() -> None:
        with contextlib.suppress(SemaphoreError):
            semaphore.acquire(timeout=60).release()

    threads = [threading.Thread(target=wait, daemon=True) for _ in range(WAITERS)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while waiting(mysql_admin, mysql_database) < WAITERS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(semaphore.status().waiters) == WAITERS
    finally:
        holder.release()
        for t in threads:
            t.join(60)
