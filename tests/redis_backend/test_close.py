"""Closing a Redis backend while its threads wait: each acquire raises, and the close
does not leave a removal retried per waiter on a client that will never answer."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.redis_harness import RedisHarness

from ..conftest import wait_until

WAITERS = 4


def test_a_close_while_threads_wait_logs_no_removal_retry_per_waiter(
    redis_harness: RedisHarness, caplog: pytest.LogCaptureFixture
) -> None:
    holder = redis_harness.connect()
    held = holder.semaphore("closing", capacity=1).acquire(timeout=10)
    backend = redis_harness.connect()
    sem = backend.semaphore("closing", capacity=1)
    outcomes: list[Any] = []

    def wait() -> None:
        try:
            outcomes.append(sem.acquire(timeout=30))
        except sr.SemaphoreError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=wait) for _ in range(WAITERS)]
    for t in threads:
        t.start()
    wait_until(lambda: len(sem.status().waiters) == WAITERS, timeout=20)
    with caplog.at_level(logging.INFO, logger="semaphore_recipes"):
        backend.close()
        for t in threads:
            t.join(20)
    assert len(outcomes) == WAITERS
    assert all(isinstance(o, sr.BackendUnavailable) for o in outcomes), outcomes
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) <= 1, retries
    assert not [r for r in caplog.records if "trying again" in r.getMessage()]
    # each waiter's removal met the closed backend, and took it for one not confirmed
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    held.release()
    wait_until(lambda: redis_harness.entries("closing") == [], timeout=10)
