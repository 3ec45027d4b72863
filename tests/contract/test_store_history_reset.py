"""A store whose history restarted (wiped, or restored from an older backup) is named.

Each test starts a throwaway server of its own (the shared ones are not disturbed),
holds a permit and queues a waiter, then stops the server, wipes its data and starts it
again on the same port: the permit must become LOST with the plain reason, the waiter
fail with it, and later calls raise ``StoreHistoryReset``, within the session timeout
and a few seconds, instead of "no answer" for minutes.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import semaphore_recipes as sr

from ..conftest import wait_until

SESSION_TIMEOUT = 4.0
SLACK = 6.0  # seconds past the session timeout the error may take (a loaded machine)


class _Wiped:
    """A throwaway server of one store, wiped and restarted on the same port."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "zookeeper":
            from semaphore_recipes.zookeeper.server import ZooKeeperServer

            self.server: Any = ZooKeeperServer().start()
            self.url = f"zookeeper://{self.server.host_port}"
        else:
            raise AssertionError(kind)

    def wipe_and_restart(self) -> None:
        self.server.stop()
        shutil.rmtree(self.server.data_dir)
        self.server.start()

    def close(self) -> None:
        self.server.close()


@pytest.fixture(params=["zookeeper"])
def wiped(request: pytest.FixtureRequest) -> Iterator[_Wiped]:
    store = _Wiped(str(request.param))
    yield store
    store.close()


def _in_background(fn: Callable[[], object]) -> list[object]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    threading.Thread(target=run, daemon=True).start()
    return outcome


def test_a_wiped_store_is_named_plainly(wiped: _Wiped, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    backend = sr.connect(f"{wiped.url}?session_timeout={SESSION_TIMEOUT:g}")
    try:
        sem = backend.semaphore("wiped", capacity=1)
        for _ in range(5):  # some history for the store to forget
            sem.acquire().release()
        held = sem.acquire()
        waiter = _in_background(lambda: sem.acquire(timeout=120))
        wait_until(lambda: len(sem.status().waiters) == 1)

        wiped.wipe_and_restart()
        restarted = time.monotonic()
        assert held.lost.wait(SESSION_TIMEOUT + SLACK), "the permit is still not lost"
        wait_until(lambda: bool(waiter), timeout=SESSION_TIMEOUT + SLACK)
        took = time.monotonic() - restarted

        assert isinstance(waiter[0], sr.BackendUnavailable), waiter
        assert "history restarted" in str(waiter[0])
        assert any(
            "history restarted" in r.getMessage()
            for r in caplog.records
            if "lost" in r.getMessage()
        )
        with pytest.raises(sr.StoreHistoryReset, match="history restarted"):
            backend.semaphore("after", capacity=1)
        assert took <= SESSION_TIMEOUT + SLACK
    finally:
        backend.close()
