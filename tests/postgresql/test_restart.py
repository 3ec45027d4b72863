"""A server restart shorter than the session: held permits are suspended, then held
again; a waiter keeps its place and is granted; nothing is lost or left behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import semaphore_recipes as sr
from semaphore_recipes.devtools.postgresql_server import PostgreSQLServer
from semaphore_recipes.testing.polling import wait_until


@pytest.fixture
def server() -> Iterator[PostgreSQLServer]:
    """A server of this test's own (the session's is shared)."""
    with PostgreSQLServer() as started:
        yield started


@pytest.mark.parametrize("shutdown", ["fast", "immediate"])
def test_a_restart_within_the_session_keeps_holders_and_waiters(
    server: PostgreSQLServer, shutdown: str
) -> None:
    url = server.url(schema="restart", session_timeout="10", request_timeout="2")
    with sr.connect(url) as holding, sr.connect(url) as waiting:
        permit = holding.semaphore("restart", capacity=1).acquire()
        sem = waiting.semaphore("restart", capacity=1)
        granted: list[sr.Permit] = []
        waiter = threading.Thread(target=lambda: granted.append(sem.acquire(timeout=30)))
        waiter.start()
        wait_until(lambda: len(sem.status().waiters) == 1)
        place = sem.status().waiters[0].key
        if shutdown == "fast":
            server.stop()
        else:
            server.stop_immediate()
        wait_until(lambda: permit.state is sr.PermitState.SUSPENDED, timeout=10)
        server.start()
        wait_until(lambda: permit.state is sr.PermitState.HELD, timeout=10)
        assert not permit.lost.is_set()
        assert [w.key for w in sem.status().waiters] == [place]
        permit.release()
        waiter.join(10)
        assert granted and granted[0].key == place
        granted[0].release()
        assert sem.status().holders == ()
