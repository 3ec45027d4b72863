"""The one listening connection of a backend: notified exactly, and looked after."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

import semaphore_recipes as sr
from semaphore_recipes.testing.faces import store_backend
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.postgresql_harness import PostgreSQLHarness


def waiters(sem: Any, count: int) -> tuple[list[threading.Thread], list[sr.Permit]]:
    granted: list[sr.Permit] = []

    def wait() -> None:
        granted.append(sem.acquire(timeout=30))

    threads = [threading.Thread(target=wait) for _ in range(count)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(sem.status().waiters) == count)
    return threads, granted


def test_a_release_notifies_exactly_the_waiters_it_admits(
    postgresql_harness: PostgreSQLHarness, postgresql_server: Any
) -> None:
    holder = postgresql_harness.connect().semaphore("exact", capacity=1).acquire()
    waiting = postgresql_harness.connect()
    threads, granted = waiters(waiting.semaphore("exact", capacity=1), 10)
    host, port = postgresql_server.host_port.rsplit(":", 1)
    with psycopg.connect(host=host, port=int(port), user="postgres", dbname="postgres",
                         autocommit=True) as spy:  # fmt: skip
        spy.execute(f'LISTEN "{store_backend(waiting).keeper.channel}"')
        holder.release()
        wait_until(lambda: len(granted) == 1)
        assert len(list(spy.notifies(timeout=0.5))) == 1  # one admitted, one told
        for permit in granted[:1]:
            permit.release()
        wait_until(lambda: len(granted) == 2)
        assert len(list(spy.notifies(timeout=0.5))) == 1
    for _ in range(8):
        wait_until(lambda: len(granted) > sum(p.state is sr.PermitState.RELEASED for p in granted))
        next(p for p in granted if p.state is sr.PermitState.HELD).release()
    for thread in threads:
        thread.join(10)
    for permit in granted:
        permit.release()


def test_waiters_are_granted_when_the_listening_connection_was_dropped(
    postgresql_harness: PostgreSQLHarness, postgresql_admin: Any
) -> None:
    """A notification sent while the backend is not listening is lost: after it listens
    again, each waiting entry looks once (the session timeout is long, so the timed
    looks cannot be what grants them)."""
    holder = postgresql_harness.connect(session_timeout=30).semaphore("dropped", capacity=2)
    held = [holder.acquire(), holder.acquire()]
    waiting = postgresql_harness.connect(session_timeout=30)
    threads, granted = waiters(waiting.semaphore("dropped", capacity=2), 2)
    keeper = store_backend(waiting).keeper
    pid = keeper.backend_pid
    postgresql_admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    for permit in held:
        permit.release()  # (notified to a channel nobody listens on, maybe)
    started = time.monotonic()
    for thread in threads:
        thread.join(10)
    assert len(granted) == 2, "a waiter was not granted after the listener came back"
    assert time.monotonic() - started < 5
    assert keeper.backend_pid != pid
    for permit in granted:
        permit.release()
