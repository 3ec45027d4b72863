"""The PostgreSQL launcher: a real server as the postgres user, restartable, leaving nothing."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import psycopg
import pytest

from semaphore_recipes.devtools.postgresql_server import PostgreSQLServer


def test_a_server_answers_both_faces_keeps_its_data_across_restarts_and_leaves_nothing() -> None:
    server = PostgreSQLServer(logical=True).start()
    workdir = server.workdir
    try:
        dsn = f"postgresql://postgres@{server.host_port}/postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v int)")
            conn.execute("INSERT INTO kept VALUES (7)")
            assert conn.execute("SHOW wal_level").fetchone() == ("logical",)

        async def async_select() -> int:
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                cursor = await conn.execute("SELECT 1")
                row = await cursor.fetchone()
                assert row is not None
                return int(row[0])

        assert asyncio.run(async_select()) == 1
        server.restart()  # fast shutdown, then start
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT v FROM kept").fetchone() == (7,)
        server.stop_immediate()  # no checkpoint: the start recovers
        server.start()
        server.kill()  # a crash
        server.start()
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT v FROM kept").fetchone() == (7,)
        pid = server.pid
    finally:
        server.close()
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not workdir.exists()


def test_a_server_started_from_another_thread_outlives_that_thread() -> None:
    server = PostgreSQLServer()
    try:
        starter = threading.Thread(target=lambda: server.start(timeout=60))
        starter.start()
        starter.join()
        time.sleep(1.0)  # (the signal comes at once; its death a little later)
        assert server.running
    finally:
        server.close()
