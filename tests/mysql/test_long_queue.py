"""``status()`` of a semaphore with a long queue (found by the benchmarks' herd at W=1000).

``sr_status`` built its reply in a ``TEXT`` variable (at most 65,535 bytes): a queue
whose JSON was longer (some 600 entries) made the step fail with error 1406, "Data too
long for column 'reply'". Replies are LONGTEXT now.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from semaphore_recipes.errors import SemaphoreError
from semaphore_recipes.testing.mysql_harness import MySQLHarness

WAITERS = 800  # (past the 64 KiB a TEXT variable held)


def waiting(admin: Any, database: str) -> int:
    with admin.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{database}`.sr_entries WHERE held = 0")
        return int(cursor.fetchone()[0])


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
