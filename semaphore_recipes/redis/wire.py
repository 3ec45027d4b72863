"""A script's round trip on a plain TCP or Unix connection, read without redis-py's parser.

The blocking runner sends an EVALSHA and reads its reply straight on the socket of a
connection redis-py made (its handshake: credentials, ``HELLO``, the database). redis-py's
reader costs each call more client work than the script's whole server time (measured
in docs/benchmarks.md); a script's reply is small and of few types, read here whole.
Only a plain ``redis.Connection`` or ``redis.UnixDomainSocketConnection`` is taken this
way (:func:`plain_socket`, a cluster node's too): TLS and Sentinel's connections (which
turn a demoted primary's ``READONLY`` into a reconnection) keep redis-py's path. The
asyncio runner keeps redis-py's reader: the same reading on its streams measured no
faster there (its cycle waits on the server between short bursts of the loop's work).

On connection loss: a send or read that fails raises redis-py's ``ConnectionError`` (the
server closed it, a reset) or ``TimeoutError`` (no reply in time), as redis-py would,
and the caller closes the connection: a reply read in part must never be taken for the
next call's. A RESP3 push message before the reply (redis-py's maintenance
notifications of Redis Enterprise) is skipped.
"""

from __future__ import annotations

import select
import socket
from typing import Any

import redis

__all__ = ["exchange", "plain_socket", "stale"]

_READ_SIZE = 65536

#: error codes as redis-py's parser maps them (the code is cut from a mapped one's text)
_ERRORS: dict[str, type[redis.exceptions.RedisError]] = {
    "OOM": redis.exceptions.OutOfMemoryError,
    "WRONGPASS": redis.exceptions.AuthenticationError,
    "EXECABORT": redis.exceptions.ExecAbortError,
    "LOADING": redis.exceptions.BusyLoadingError,
    "NOSCRIPT": redis.exceptions.NoScriptError,
    "READONLY": redis.exceptions.ReadOnlyError,
    "NOAUTH": redis.exceptions.AuthenticationError,
    "NOPERM": redis.exceptions.NoPermissionError,
    "MASTERDOWN": redis.exceptions.MasterDownError,
    "ASK": redis.exceptions.AskError,
    "TRYAGAIN": redis.exceptions.TryAgainError,
    "MOVED": redis.exceptions.MovedError,
    "CLUSTERDOWN": redis.exceptions.ClusterDownError,
    "CROSSSLOT": redis.exceptions.ClusterCrossSlotError,
}
#: the ``ERR`` texts redis-py maps to classes of their own (else a ResponseError)
_ERR_TEXTS: dict[str, type[redis.exceptions.RedisError]] = {
    "max number of clients reached": redis.exceptions.ConnectionError,
    "invalid password": redis.exceptions.AuthenticationError,
}

_PLAIN = (redis.Connection, redis.UnixDomainSocketConnection)


def plain_socket(conn: Any) -> socket.socket | None:
    """The socket of ``conn`` if it is a connected plain connection (not TLS, not
    Sentinel's), else None. (redis-py keeps it as ``_sock`` and offers no public name
    for it; a version without it only loses this shortcut.)"""
    if conn.__class__ not in _PLAIN:
        return None
    sock = getattr(conn, "_sock", None)
    return sock if sock.__class__ is socket.socket else None


def stale(sock: socket.socket) -> bool:
    """Has ``sock`` something to read before anything was sent (a reply nobody read),
    or did the server close it? One poll that does not wait. (Not a peeking ``recv``:
    on a socket with a timeout Python waits for data first.)"""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def exchange(sock: socket.socket, packed: bytes, within: float | None) -> Any:
    """Send ``packed`` (one command) and read its whole reply, the first of it awaited
    at most ``within`` seconds (None: the socket's timeout). An error reply is raised as
    redis-py raises it; the connection is then still in step."""
    try:
        sock.sendall(packed)
        if within is None:
            data = _received(sock.recv(_READ_SIZE))
        else:
            usual = sock.gettimeout()
            sock.settimeout(within)
            try:
                data = _received(sock.recv(_READ_SIZE))
            finally:
                sock.settimeout(usual)
        while (parsed := _parsed(data)) is None:
            data += _received(sock.recv(_READ_SIZE))
    except TimeoutError as exc:  # (socket.timeout)
        raise redis.exceptions.TimeoutError(f"no reply in time ({exc})") from exc
    except OSError as exc:
        raise redis.exceptions.ConnectionError(f"connection failed: {exc}") from exc
    return _answer(data, parsed)


def _received(chunk: bytes) -> bytes:
    """``chunk``, read from the connection; none: the server closed it."""
    if not chunk:
        raise redis.exceptions.ConnectionError("Connection closed by server.")
    return chunk


def _parsed(data: bytes) -> tuple[Any, int] | None:
    """The reply at the start of ``data`` (push messages before it skipped) and where
    it ends; None while it is incomplete."""
    pos = 0
    try:
        while True:
            reply, end = _value(data, pos)
            if data[pos : pos + 1] != b">":
                return reply, end
            pos = end  # (a push message)
    except _Incomplete:
        return None


def _answer(data: bytes, parsed: tuple[Any, int]) -> Any:
    reply, end = parsed
    if end != len(data):
        raise redis.exceptions.ConnectionError("a reply longer than its call's")
    if isinstance(reply, redis.exceptions.ResponseError):
        raise reply
    return reply


class _Incomplete(Exception):
    """The bytes read so far end inside the reply."""


def _line(data: bytes, start: int) -> tuple[bytes, int]:
    end = data.find(b"\r\n", start)
    if end < 0:
        raise _Incomplete
    return data[start:end], end + 2


def _value(data: bytes, pos: int) -> tuple[Any, int]:
    """The RESP2/RESP3 value at ``pos`` and where it ends (``_Incomplete`` if it does
    not end in ``data``)."""
    kind = data[pos : pos + 1]
    text, pos = _line(data, pos + 1)
    if kind == b":":
        return int(text), pos
    if kind == b"$" or kind == b"=":
        size = int(text)
        if size < 0:
            return None, pos
        if len(data) < pos + size + 2:
            raise _Incomplete
        skip = 4 if kind == b"=" else 0  # (a verbatim string's format, "txt:", as redis-py)
        return data[pos + skip : pos + size], pos + size + 2
    if kind == b"*" or kind == b"~" or kind == b">":
        count = int(text)
        if count < 0:
            return None, pos
        items = []
        for _ in range(count):
            item, pos = _value(data, pos)
            items.append(item)
        return items, pos
    if kind == b"+":
        return text, pos
    if kind == b"-" or kind == b"!":
        if kind == b"!":  # a bulk error: its length, then the text
            size = int(text)
            if len(data) < pos + size + 2:
                raise _Incomplete
            text, pos = data[pos : pos + size], pos + size + 2
        return _error(text.decode(errors="replace")), pos
    if kind == b"_":
        return None, pos
    if kind == b"#":
        return text == b"t", pos
    if kind == b",":
        return float(text), pos
    if kind == b"(":
        return int(text), pos
    if kind == b"%":
        pairs = {}
        for _ in range(int(text)):
            key, pos = _value(data, pos)
            pairs[key], pos = _value(data, pos)
        return pairs, pos
    raise redis.exceptions.ConnectionError(f"a reply of unknown type {kind!r}")


def _error(text: str) -> redis.exceptions.ResponseError:
    code, _, rest = text.partition(" ")
    if code == "ERR":
        kind: type[redis.exceptions.RedisError] | None = _ERR_TEXTS.get(rest)
        kind = redis.exceptions.ResponseError if kind is None else kind
    else:
        kind = _ERRORS.get(code)
        if kind is None:
            return redis.exceptions.ResponseError(text)
    error = kind(rest)
    if not isinstance(error, redis.exceptions.ResponseError):
        # (redis-py raises these as they are: connection-class errors, retried)
        raise error
    return error
