"""A server restart or crash shorter than the session: held permits are suspended, then
held again; a waiter keeps its place and is granted; nothing is lost or left behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pymysql
import pytest

import semaphore_recipes as sr
from semaphore_recipes.devtools.mysql_server import MariaDBServer
from semaphore_recipes.testing.polling import wait_until


@pytest.fixture
def server() -> Iterator[MariaDBServer]:
    """A server of this test's own (the session's is shared), with a database."""
    with MariaDBServer() as started:
        host, port = started.host_port.rsplit(":", 1)
        with pymysql.connect(host=host, port=int(port), user="root") as conn:
            conn.cursor().execute("CREATE DATABASE restart")
        yield started


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_a_restart_within_the_session_keeps_holders_and_waiters(
    server: MariaDBServer, shutdown: str
) -> None:
    url = server.url("restart", session_timeout="10", request_timeout="2")
    with sr.connect(url) as holding, sr.connect(url) as waiting:
        permit = holding.semaphore("restart", capacity=1).acquire()
        sem = waiting.semaphore("restart", capacity=1)
        granted: list[sr.Permit] = []
        waiter = threading.Thread(target=lambda: granted.append(sem.acquire(timeout=30)))
        waiter.start()
        wait_until(lambda: len(sem.status().waiters) == 1)
        place = sem.status().waiters[0].key
        if shutdown == "clean":
            server.stop()
        else:
            server.kill()
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
