"""The blocking runner's own reply reader (``semaphore_recipes.redis.wire``): the same
answers and errors as redis-py's parser on a real server, every RESP type read whole
however the bytes arrive, and a connection loss or a silent server raised as redis-py
raises them; and the asyncio runner's call (redis-py's reader) closes its connection
when cancelled."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.sentinel

from semaphore_recipes._bounded_await import bounded
from semaphore_recipes.redis.calls import evalsha_on, evalsha_packed, exchange_on
from semaphore_recipes.redis.connections import AsyncIdleConnections, IdleConnections
from semaphore_recipes.redis.wire import exchange, plain_socket

# scripts whose replies cover what a script can answer, nested
_SCRIPTS = [
    "return 1",
    "return -7",
    "return 'text'",
    "return ''",
    "return redis.status_reply('FINE')",
    "return false",
    "return {}",
    "return {1, 'a', {2, {}, {'b', -3}}, 4}",
    "return {1, false, 3}",  # (a table ends at its first nil: a false is sent as nil)
    "return string.rep('x', 200000)",  # longer than one read
    "return {string.rep('y', 70000), string.rep('z', 70000)}",
    "return redis.call('time')",
]


@pytest.fixture
def client(redis_server: Any) -> Iterator[redis.Redis]:
    host, port = redis_server.host_port.rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port), socket_timeout=10)
    yield client
    client.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_replies_are_those_redis_py_reads(redis_server: Any, protocol: int) -> None:
    host, port = redis_server.host_port.rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port), protocol=protocol, socket_timeout=10)
    connections = IdleConnections(client)
    try:
        for source in _SCRIPTS:
            sha = client.script_load(source)
            conn = connections.take()
            assert plain_socket(conn) is not None  # (the reader under test, not redis-py's)
            try:
                ours = evalsha_on(conn, sha, (), ("a",), None)
            finally:
                connections.give_back(conn)
            theirs = client.evalsha(sha, 0, "a")
            if source.endswith("'time')"):
                assert [type(x) for x in ours] == [type(x) for x in theirs] == [bytes, bytes]
            else:
                assert ours == theirs, source
    finally:
        connections.close()
        client.close()


def test_a_cancelled_asyncio_call_closes_its_connection(redis_server: Any) -> None:
    """A reply not read whole must never be read as the next call's."""
    host, port = redis_server.host_port.rsplit(":", 1)
    busy = "local t = redis.call('time') local e = t[1] * 1e6 + t[2] + 400000 "
    busy += "repeat t = redis.call('time') until t[1] * 1e6 + t[2] >= e return 'late'"

    async def scenario() -> None:
        client = redis.asyncio.Redis(host=host, port=int(port))
        connections = AsyncIdleConnections(client)
        try:
            sha = await client.script_load(busy)
            conn = await connections.take()
            with pytest.raises(asyncio.TimeoutError):
                await bounded(exchange_on(conn, evalsha_packed(sha, (), ())), 0.1)
            assert not conn.is_connected
            await connections.give_back(conn)
            again = await connections.take()  # (the same one, connected anew)
            five = await client.script_load("return 5")
            assert await exchange_on(again, evalsha_packed(five, (), ())) == 5
            await connections.give_back(again)
        finally:
            await connections.close()
            await client.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("source", "kind", "text"),
    [
        ("return redis.error_reply('NOPERM no')", redis.exceptions.NoPermissionError, "no"),
        ("return redis.error_reply('ODD thing')", redis.exceptions.ResponseError, "ODD thing"),
        ("return redis.call('nosuchcommand')", redis.exceptions.ResponseError, None),
        ("return redis.error_reply('READONLY gone')", redis.exceptions.ReadOnlyError, "gone"),
    ],
)
def test_error_replies_are_raised_as_redis_py_raises_them(
    client: redis.Redis, source: str, kind: type[Exception], text: str | None
) -> None:
    sha = client.script_load(source)
    connections = IdleConnections(client)
    try:
        conn = connections.take()
        with pytest.raises(kind) as ours:
            evalsha_on(conn, sha, (), (), None)
        with pytest.raises(kind) as theirs:
            client.evalsha(sha, 0)
        assert type(ours.value) is type(theirs.value)
        assert str(ours.value) == str(theirs.value)
        if text is not None:
            assert str(ours.value) == text
        # an error reply is read whole: the connection goes on in step
        assert evalsha_on(conn, client.script_load("return 5"), (), (), None) == 5
        connections.give_back(conn)
    finally:
        connections.close()


def test_a_missing_script_is_no_script_error(client: redis.Redis) -> None:
    connections = IdleConnections(client)
    try:
        conn = connections.take()
        with pytest.raises(redis.exceptions.NoScriptError):
            evalsha_on(conn, "0" * 40, (), (), None)
        connections.give_back(conn)
    finally:
        connections.close()


def _served(reply: bytes, chunk: int, pause: float = 0.0) -> socket.socket:
    """One end of a socket pair whose other end answers ``reply``, ``chunk`` bytes at a
    time, to whatever it is sent first."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)

    def serve() -> None:
        theirs.recv(65536)
        for start in range(0, len(reply), chunk):
            theirs.sendall(reply[start : start + chunk])
            if pause:
                time.sleep(pause)
        theirs.close()

    threading.Thread(target=serve, daemon=True).start()
    return ours


@pytest.mark.parametrize("chunk", [1, 3, 1 << 16])
def test_every_type_is_read_whole_however_it_arrives(chunk: int) -> None:
    reply = (
        b"*13\r\n:42\r\n$3\r\nabc\r\n$-1\r\n+OK\r\n_\r\n#t\r\n#f\r\n,1.5\r\n(12345678901234567890\r\n"
        b"%1\r\n+k\r\n:1\r\n~2\r\n:1\r\n:2\r\n=8\r\ntxt:abcd\r\n*2\r\n*0\r\n-ERR inner\r\n"
    )
    sock = _served(reply, chunk)
    got = exchange(sock, b"PING\r\n", None)
    inner = got[12][1]
    assert got[:12] == [
        42,
        b"abc",
        None,
        b"OK",
        None,
        True,
        False,
        1.5,
        12345678901234567890,
        {b"k": 1},
        [1, 2],
        b"abcd",
    ]
    assert got[12][0] == []
    assert isinstance(inner, redis.exceptions.ResponseError) and str(inner) == "inner"
    sock.close()


def test_a_push_message_before_the_reply_is_skipped() -> None:
    sock = _served(b">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n:7\r\n", 2)
    assert exchange(sock, b"PING\r\n", None) == 7
    sock.close()


def test_a_connection_closed_within_a_reply_is_a_connection_error() -> None:
    sock = _served(b"*3\r\n:1\r\n:2\r\n", 1 << 16)  # one element short, then closed
    with pytest.raises(redis.exceptions.ConnectionError):
        exchange(sock, b"PING\r\n", None)
    sock.close()


def test_a_reply_late_past_its_bound_is_a_timeout() -> None:
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    started = time.monotonic()
    with pytest.raises(redis.exceptions.TimeoutError):
        exchange(ours, b"PING\r\n", 0.2)
    assert time.monotonic() - started < 2
    assert ours.gettimeout() == 5  # (the socket's own timeout is back)
    ours.close()
    theirs.close()


def test_a_connection_error_reply_is_raised_as_one() -> None:
    sock = _served(b"-ERR max number of clients reached\r\n", 1 << 16)
    with pytest.raises(redis.exceptions.ConnectionError):
        exchange(sock, b"PING\r\n", None)
    sock.close()


def test_tls_and_sentinel_connections_keep_redis_pys_path() -> None:
    tls: Any = redis.SSLConnection
    sentinels: Any = redis.sentinel.SentinelManagedConnection
    plain: Any = redis.Connection
    assert plain_socket(tls(host="127.0.0.1", port=1)) is None
    assert plain_socket(sentinels(host="127.0.0.1", port=1, connection_pool=None)) is None
    assert plain_socket(plain(host="127.0.0.1", port=1)) is None  # (not connected)
