"""The runner's own idle connections (``semaphore_recipes.redis.connections``): one the
server closed, or one with a reply nobody read, is made anew when taken, so the call
sent on it is the first thing on a fresh connection; after ``close`` nothing stays open."""

from __future__ import annotations

import asyncio
import select
import sys
from typing import Any

import pytest
import redis
import redis.asyncio

from semaphore_recipes import aio
from semaphore_recipes.devtools.processes import free_port
from semaphore_recipes.redis.connections import (
    MAX_ASYNC_CONNECTIONS,
    AsyncIdleConnections,
    AsyncTurns,
    IdleConnections,
)
from semaphore_recipes.redis.wire import plain_socket


def _client_id(conn: Any) -> int:
    conn.send_command("CLIENT", "ID")
    return int(conn.read_response())


def test_a_connection_the_server_closed_is_made_anew_when_taken(
    redis_server: Any, redis_admin: redis.Redis
) -> None:
    host, port = redis_server.host_port.rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port))
    connections = IdleConnections(client)
    try:
        conn = connections.take()
        killed = _client_id(conn)
        connections.give_back(conn)
        assert redis_admin.client_kill_filter(_id=str(killed)) == 1
        again = connections.take()
        assert _client_id(again) != killed  # no ConnectionError: a new connection
        connections.give_back(again)
    finally:
        connections.close()
        client.close()


def test_a_connection_with_an_unread_reply_is_made_anew_when_taken(redis_server: Any) -> None:
    host, port = redis_server.host_port.rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port))
    connections = IdleConnections(client)
    try:
        conn = connections.take()
        first = _client_id(conn)
        conn.send_command("ECHO", "late")  # its reply is never read
        # (it has come, still in the socket, where the runner's own reads leave it: not
        # `can_read`, which would move it into redis-py's buffer)
        sock = plain_socket(conn)
        assert sock is not None and select.select([sock], [], [], 5)[0]
        connections.give_back(conn)
        again = connections.take()
        again.send_command("ECHO", "mine")
        assert again.read_response() == b"mine"  # not the late reply
        assert _client_id(again) != first
        connections.give_back(again)
    finally:
        connections.close()
        client.close()


def test_close_disconnects_the_idle_and_those_given_back_after_it(redis_server: Any) -> None:
    host, port = redis_server.host_port.rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port))
    connections = IdleConnections(client)
    idle, busy = connections.take(), connections.take()
    connections.give_back(idle)
    connections.close()
    connections.give_back(busy)
    assert not idle.is_connected and not busy.is_connected
    client.close()


def test_the_asyncio_runners_connection_the_server_closed_is_made_anew(
    redis_server: Any, redis_admin: redis.Redis
) -> None:
    host, port = redis_server.host_port.rsplit(":", 1)

    async def scenario() -> tuple[int, int]:
        client = redis.asyncio.Redis(host=host, port=int(port))
        connections = AsyncIdleConnections(client)
        try:
            conn = await connections.take()
            await conn.send_command("CLIENT", "ID")
            killed = int(await conn.read_response())
            await connections.give_back(conn)
            assert redis_admin.client_kill_filter(_id=str(killed)) == 1
            await asyncio.sleep(0.2)  # (the loop takes in the close, as it would meanwhile)
            again = await connections.take()
            await again.send_command("CLIENT", "ID")
            fresh = int(await again.read_response())  # no ConnectionError: a new one
            await connections.give_back(again)
            return killed, fresh
        finally:
            await connections.close()
            await client.aclose()

    killed, fresh = asyncio.run(scenario())
    assert fresh != killed


def test_failed_connects_do_not_use_up_the_pools_connections() -> None:
    """A take whose connect fails keeps its connection for the next take: redis-py's
    pool counts every connection it made against ``max_connections``."""
    port = free_port()  # nobody listens there
    client = redis.Redis(port=port, max_connections=2, socket_connect_timeout=1)
    connections = IdleConnections(client)
    try:
        for _ in range(5):
            with pytest.raises(redis.ConnectionError, match="connecting"):
                connections.take()
    finally:
        connections.close()
        client.close()


def test_the_packed_evalsha_is_what_redis_py_sends() -> None:
    """The runners encode EVALSHA themselves (its start made once per shape): byte for
    byte what redis-py's own encoder makes of the same arguments."""
    from semaphore_recipes.redis.calls import evalsha_packed

    class Text(str):
        pass

    encoder: Any = redis.Redis().get_encoder()
    sha = "0123456789abcdef0123456789abcdef01234567"
    cases: list[tuple[tuple[str, ...], tuple[Any, ...]]] = [
        ((), (b"P", b"name", "id.1", "lease", 1, "owner", 0, 12, "")),
        (("P:{t}:seq",), ("P:{t}", "n", -3, 2.5, Text("sub"), "é", b"\x00\r\n")),
        ((), ()),
    ]
    for keys, args in cases:
        for _ in range(2):  # (the second time from the cached start)
            words = [b"EVALSHA", sha, len(keys), *keys, *args]
            expected = b"*%d\r\n" % len(words) + b"".join(
                b"$%d\r\n%b\r\n" % (len(encoder.encode(w)), encoder.encode(w)) for w in words
            )
            assert evalsha_packed(sha, keys, args) == expected


def test_many_tasks_of_one_loop_share_at_most_the_runners_connections(
    redis_server: Any, redis_admin: redis.Redis
) -> None:
    """300 tasks acquiring at once on one backend: each call takes one of the runner's
    connections, at most MAX_ASYNC_CONNECTIONS out (25,000 tasks took a connection each,
    and four such processes ran out of local ports)."""
    tasks = 300
    url = f"redis://{redis_server.host_port}/0?prefix=many-{free_port()}"
    before = int(redis_admin.info("clients")["connected_clients"])

    async def scenario() -> int:
        async with aio.connect(url) as backend:
            sem = backend.semaphore("many", capacity=1)
            holder = await sem.acquire()
            waiting = [asyncio.ensure_future(sem.acquire(timeout=60)) for _ in range(tasks)]
            while len((await sem.status()).waiters) < tasks:
                await asyncio.sleep(0.02)
            most = int(redis_admin.info("clients")["connected_clients"]) - before
            await holder.release()
            for done in asyncio.as_completed(waiting):
                await (await done).release()
            return most

    most = asyncio.run(scenario())
    # the runner's own, and the few of redis-py's pool (status, the inbox's BLPOP, renewals)
    # (a connection per task, as before: 301)
    assert most <= MAX_ASYNC_CONNECTIONS + 8 < tasks, most


def test_a_turn_handed_to_a_cancelled_or_late_taker_goes_on(redis_server: Any) -> None:
    """With every connection out, takers wait in order; one that times out or is
    cancelled as a connection comes back hands its turn on, so none is lost."""
    host, port = redis_server.host_port.rsplit(":", 1)

    async def scenario() -> list[str]:
        client = redis.asyncio.Redis(host=host, port=int(port))
        connections = AsyncIdleConnections(client, AsyncTurns(1))
        try:
            out = await connections.take()
            late = asyncio.ensure_future(connections.take(timeout=0.05))
            cancelled = asyncio.ensure_future(connections.take())
            waiting = asyncio.ensure_future(connections.take(timeout=5))
            await asyncio.sleep(0.1)  # `late` timed out
            cancelled.cancel()
            await connections.give_back(out)  # handed to `cancelled`, then on to `waiting`
            conn = await waiting
            await connections.give_back(conn)
            again = await connections.take(timeout=1)  # the one connection is not lost
            await connections.give_back(again)
            outcomes = []
            for task in (late, cancelled):
                try:
                    await task
                    outcomes.append("took")
                except TimeoutError:
                    outcomes.append("timed out")
                except asyncio.CancelledError:
                    outcomes.append("cancelled")
            return outcomes
        finally:
            await connections.close()
            await client.aclose()

    assert asyncio.run(scenario()) == ["timed out", "cancelled"]


def test_calls_through_the_clients_own_pool_share_the_runners_turns(
    redis_server: Any, redis_admin: redis.Redis
) -> None:
    """300 tasks reading the status at once (a read-only script, sent through redis-py's
    own pool, which has no limit): they take turns with the scripts, at most
    MAX_ASYNC_CONNECTIONS calls out (a connection per task before: 300)."""
    tasks = 300
    url = f"redis://{redis_server.host_port}/0?prefix=reads-{free_port()}"
    before = int(redis_admin.info("clients")["connected_clients"])

    async def scenario() -> tuple[int, int]:
        async with aio.connect(url) as backend:
            sem = backend.semaphore("reads", capacity=2)
            holder = await sem.acquire()
            statuses = await asyncio.gather(*(sem.status() for _ in range(tasks)))
            most = int(redis_admin.info("clients")["connected_clients"]) - before
            await holder.release()
            return most, sum(len(status.holders) for status in statuses)

    most, holders_seen = asyncio.run(scenario())
    assert holders_seen == tasks  # every read answered, each saw the one holder
    assert most <= MAX_ASYNC_CONNECTIONS + 8 < tasks, most


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is Python 3.11's")
def test_an_asyncio_script_call_runs_in_the_calling_task(redis_server: Any) -> None:
    """A script call of the asyncio runner is bounded without a task of its own, and a
    release is awaited in the calling task: an acquire+release makes no task (under
    redis-py's socket timeout every write ran in a ``wait_for`` task, and the release's
    removal was shielded in one of its own)."""
    url = f"redis://{redis_server.host_port}/0?prefix=tasks-{free_port()}"
    cycles = 20

    async def scenario() -> int:
        async with aio.connect(url) as backend:
            sem = backend.semaphore("tasks", capacity=1)
            await (await sem.acquire(timeout=5)).release()  # (connections made)
            loop = asyncio.get_running_loop()
            made = 0
            create_task = loop.create_task

            def counting(coro: Any, **kwargs: Any) -> Any:
                nonlocal made
                made += 1
                return create_task(coro, **kwargs)

            loop.create_task = counting  # type: ignore[method-assign]
            try:
                for _ in range(cycles):
                    await (await sem.acquire(timeout=5)).release()
            finally:
                loop.create_task = create_task  # type: ignore[method-assign]
            return made

    assert asyncio.run(scenario()) == 0
