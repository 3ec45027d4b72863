"""The idle connections a runner sends its scripts on, kept by the runner itself.

redis-py's pool does the same job with more around it on every checkout and return (a
lock, fork checks, event dispatch, observability counters), which costs a blocking
script call more than the call's own client work. These connections come from the
client's pool (``make_connection``: its options, credentials and TLS) but are never
returned to it: a runner takes one, sends, reads the whole reply and gives it back. A
connection whose reply was not read whole is disconnected by the runner before it is
given back (it reconnects on its next use); one that has something to read when taken
(the server closed it, or a reply nobody read) is reconnected first, as the pool does.
A connection that fails to connect when taken is kept, disconnected, for the next take:
redis-py's blocking pool counts every connection it made against its
``max_connections`` (100 by default), and these are never returned to it, so one
dropped at each failed connect (a failover, a cut network) would end, after enough of
them, in "Too many connections" for good (the asyncio pool counts none). A forked
child starts with none (its parent's sockets are not its own). ``close`` disconnects
those idle and every one given back after it. :class:`AsyncIdleConnections`
does the same for the asyncio runner, on one event loop (a cancelled read closes its
connection: redis-py's asyncio connections do on any exception), with at most
:data:`MAX_ASYNC_CONNECTIONS` out at once: the tasks of one loop, unlike threads, can
all be in a call at the same time. The runner's other calls, sent through the client's
own pool (which has no limit; on Redis Cluster, every call), take the same turns
(:class:`AsyncTurns`).
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
from typing import Any

import redis
import redis.asyncio

from .wire import plain_socket, stale

__all__ = ["AsyncIdleConnections", "AsyncTurns", "IdleConnections"]


class IdleConnections:
    """Connections of ``client``'s pool kept by one blocking runner."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool: Any = client.connection_pool  # (redis-py's pool methods are untyped)
        self._idle: list[Any] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()  # (close against a connection given back meanwhile)
        self._closed = False

    def take(self) -> Any:
        """A connected connection with nothing unread (made when none is idle)."""
        if self._pid != os.getpid():  # a forked child: its parent's sockets are not ours
            self._idle, self._pid = [], os.getpid()
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = self._pool.make_connection()
        try:
            sock = plain_socket(conn)
            if sock is None:
                conn.connect()  # (nothing when connected; through redis-py's retry wrapper)
            if _stale(conn, sock):  # closed by the server, or a reply nobody read: anew
                conn.disconnect()
                conn.connect()
        except BaseException:
            conn.disconnect()
            self.give_back(conn)  # (made by the pool, counted there: used again)
            raise
        return conn

    def give_back(self, conn: Any) -> None:
        """``conn`` is in step again (its replies read whole, or disconnected)."""
        with self._lock:
            if not self._closed:
                self._idle.append(conn)
                return
        conn.disconnect()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()


#: the most connections an asyncio runner has out at once; a call beyond waits for one
#: to come back. Tasks of one loop are not threads: 25,000 acquiring at once each took
#: a connection of their own, and four such processes ran out of local ports
MAX_ASYNC_CONNECTIONS = 64


class AsyncTurns:
    """At most ``most`` calls of one asyncio runner (one event loop) out at once, the
    others waiting their turn in the order they asked."""

    def __init__(self, most: int = MAX_ASYNC_CONNECTIONS) -> None:
        self._free = most  # calls that may still go out
        self._asking: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self, timeout: float | None = None) -> None:
        """A turn, once fewer than the most are out; TimeoutError when none came back
        within ``timeout`` seconds (None: no limit). A cancelled or timed-out wait
        takes none. Each turn taken is given back once (:meth:`give_back`)."""
        # (asyncio.wait, not wait_for: before 3.12 wait_for can drop a turn handed over
        # as it times out, and the runner would have one turn fewer for good)
        if self._free > 0 and not self._asking:
            self._free -= 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._asking.append(turn)
        try:
            await asyncio.wait((turn,), timeout=timeout)
        except BaseException:  # cancelled: a turn handed to us meanwhile goes on
            if turn.done() and not turn.cancelled():
                self.give_back()
            raise
        finally:
            if not turn.done():
                turn.cancel()
                self._asking.remove(turn)
        if turn.cancelled():
            raise TimeoutError(f"no turn came back within {timeout} s")

    def give_back(self) -> None:
        """A call is over: the next one asking may go, else one more is free."""
        while self._asking:
            turn = self._asking.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._free += 1


class AsyncIdleConnections:
    """Connections of ``client``'s pool kept by one asyncio runner (one event loop),
    each taken in one of the runner's :class:`AsyncTurns` (at most
    :data:`MAX_ASYNC_CONNECTIONS` out at once, by default). They have no socket
    timeout once connected: whoever takes one bounds its call on it as a whole (under
    redis-py's socket timeout every write would run in a task of its own)."""

    def __init__(self, client: redis.asyncio.Redis, turns: AsyncTurns | None = None) -> None:
        self._pool: Any = client.connection_pool  # (redis-py's pool methods are untyped)
        self._idle: list[Any] = []
        self._closed = False
        self._turns = AsyncTurns() if turns is None else turns
        # (the socket timeout of its connections' handshakes; cleared for their calls)
        self._socket_timeout = self._pool.connection_kwargs.get("socket_timeout")

    async def take(self, timeout: float | None = None) -> Any:
        """A connected connection with nothing unread (made when none is idle), in a
        turn (:meth:`AsyncTurns.take`: TimeoutError after ``timeout``)."""
        await self._turns.take(timeout)
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = self._pool.make_connection()
        # a (re)connection's handshake timed as redis-py times it
        conn.socket_timeout = self._socket_timeout
        try:
            await _ready(conn)
        except BaseException:
            await conn.disconnect(nowait=True)
            self._turns.give_back()
            raise
        conn.socket_timeout = None
        return conn

    async def give_back(self, conn: Any) -> None:
        """``conn`` is in step again (its replies read whole, or disconnected)."""
        self._turns.give_back()
        if not self._closed:
            self._idle.append(conn)
            return
        await conn.disconnect()

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.disconnect()


def _stale(conn: Any, sock: Any = None) -> bool:
    """Has ``conn`` (``sock`` its plain socket, if it has one) something to read before
    anything was sent (a reply nobody read), or did the server close it? (``can_read``
    raises for the latter.)"""
    if sock is not None:
        return stale(sock)  # (one peek: ``can_read`` costs a call more than that)
    try:
        return bool(conn.can_read())
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        return True


async def _ready(conn: Any) -> None:
    """``conn`` connected, with nothing unread (a stale one made anew)."""
    await conn.connect()  # (nothing when connected)
    if await _stale_async(conn):  # closed by the server, or an unread reply: anew
        await conn.disconnect()
        await conn.connect()


async def _stale_async(conn: Any) -> bool:
    """:func:`_stale` for an asyncio connection."""
    try:
        return bool(await conn.can_read())
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        return True
