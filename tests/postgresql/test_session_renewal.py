"""The session row is renewed every third of the session timeout, not at each wait."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

from semaphore_recipes.testing.faces import store_backend
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.postgresql_harness import PostgreSQLHarness


def test_a_waiting_acquire_does_not_renew_the_session(
    postgresql_harness: PostgreSQLHarness, postgresql_admin: Any
) -> None:
    holder = postgresql_harness.connect(session_timeout=30).semaphore("renewal", capacity=1)
    held = holder.acquire()
    waiting = postgresql_harness.connect(session_timeout=30)
    channel = store_backend(waiting).keeper.channel

    def expires_at() -> datetime:
        row = postgresql_admin.execute(
            f"SELECT expires_at FROM {postgresql_harness.schema}.sessions WHERE channel = %s",
            (channel,),
        ).fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    time.sleep(0.5)  # the keeper renews once at once after it connects
    before = expires_at()
    sem = waiting.semaphore("renewal", capacity=1)
    thread = threading.Thread(target=lambda: sem.acquire(timeout=10).release())
    thread.start()
    wait_until(lambda: len(sem.status().waiters) == 1)
    time.sleep(0.5)
    renewed = expires_at() != before  # the next renewal is due 10 s after the first
    held.release()
    thread.join(10)
    assert not renewed, "the waiting acquire renewed the session"
