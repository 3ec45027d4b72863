"""A store whose history restarted (wiped, or restored from an older backup) is named.

Each test starts a throwaway server of its own (the shared ones are not disturbed),
holds a permit and queues a waiter, then stops the server, wipes its data and starts it
again on the same port: the permit must become LOST with the plain reason, the waiter
fail with it, and later calls raise ``StoreHistoryReset``, within the session timeout
and a few seconds, instead of "no answer" for minutes.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio
from semaphore_recipes.testing.polling import wait_until

SESSION_TIMEOUT = 4.0
SLACK = 6.0  # seconds past the session timeout the error may take (a loaded machine)


class _Wiped:
    """A throwaway server of one store, wiped and restarted on the same port."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "zookeeper":
            from semaphore_recipes.devtools.zookeeper_server import ZooKeeperServer

            self.server: Any = ZooKeeperServer().start()
            self.url = f"zookeeper://{self.server.host_port}"
        elif kind == "etcd":
            from semaphore_recipes.devtools.etcd_server import EtcdServer

            self.server = EtcdServer().start()
            self.url = f"etcd://{self.server.endpoint}"
        elif kind == "redis":
            from semaphore_recipes.devtools.redis_server import RedisServer

            self.server = RedisServer(persistent=False).start()
            self.url = f"redis://{self.server.host_port}/0"
        else:
            raise AssertionError(kind)

    def wipe_and_restart(self) -> None:
        self.server.stop()
        if self.kind != "redis":  # (a Redis server without persistence comes back empty)
            shutil.rmtree(self.server.data_dir)
        self.server.start()

    def close(self) -> None:
        self.server.close()


@pytest.fixture(params=["zookeeper", "etcd", "redis"])
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
        # a later call: etcd learns of the new history from the next lease grant
        with pytest.raises(sr.StoreHistoryReset, match="history restarted"):
            sem.acquire(timeout=SESSION_TIMEOUT + SLACK)
        took = time.monotonic() - restarted
        assert took <= 2 * (SESSION_TIMEOUT + SLACK)

        said = [r.getMessage() for r in caplog.records]
        outcome = waiter[0]
        if wiped.kind == "etcd":
            # The lease is found gone (LOST: "lease expired") before the next grant's
            # reply shows that the history went back; the waiter, on that lease too, may
            # be granted as it goes (a LOST permit) or enter the queue again and fail.
            assert isinstance(outcome, (sr.Permit, sr.BackendUnavailable)), outcome
            if isinstance(outcome, sr.Permit):
                assert outcome.state is sr.PermitState.LOST
            else:
                assert "history restarted" in str(outcome)
            errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
            assert any("history restarted" in m for m in errors), said
        elif wiped.kind == "zookeeper":
            # The history check (every server's srvr, twice 1 s apart) may conclude after
            # the client's own verdict of a whole session timeout without a connection,
            # on a loaded machine: the permit is lost either way, the waiter and later
            # calls are told the history restarted.
            assert isinstance(outcome, sr.BackendUnavailable), outcome
            assert "history restarted" in str(outcome)
            assert any("history restarted" in m for m in said), said
        else:
            assert isinstance(outcome, sr.BackendUnavailable), outcome
            assert "history restarted" in str(outcome)
            assert any("lost: " in m and "history restarted" in m for m in said), said
    finally:
        backend.close()


def test_the_asyncio_face_is_told_too(wiped: _Wiped) -> None:
    """The same through ``sr.aio``: a held permit is lost, a later acquire raises
    StoreHistoryReset, and the loop is not blocked meanwhile."""

    async def main() -> None:
        url = f"{wiped.url}?session_timeout={SESSION_TIMEOUT:g}"
        async with aio.connect(url) as backend:
            sem = await backend.semaphore("wiped", capacity=1).open()
            for _ in range(5):
                await (await sem.acquire()).release()
            held = await sem.acquire()
            wiped.wipe_and_restart()  # (blocks the loop while the server restarts)
            await asyncio.wait_for(held.lost.wait(), SESSION_TIMEOUT + SLACK)
            with pytest.raises(sr.StoreHistoryReset, match="history restarted"):
                await sem.acquire(timeout=SESSION_TIMEOUT + SLACK)

    asyncio.run(main())
