"""What a store's addresses answer when ``connect()`` cannot reach the store.

Before an etcd or Redis client starts, :func:`refuse_early` (:func:`refuse_early_async`)
knocks: one TCP connection to each address at once, closed without a byte sent. When
every address refused (or did not resolve, or is unreachable) it raises
BackendUnavailable at once, naming each address and what it said, instead of letting
the client retry for the whole connect timeout. As soon as one address accepts, or after
at most :data:`KNOCK_WAIT` seconds with an address still silent, the client is left to
connect within the connect timeout (a silent member may be on its way back). Not before
ZooKeeper's client: ZooKeeper logs a warning with a stack trace for a connection closed
without a byte; ``zookeeper/_refusals.py`` watches kazoo's own attempts instead.

When the client then fails to connect, :func:`diagnose` (:func:`diagnose_async`) tells
what each address answered: refused, silent, or "answered but does not speak etcd (it
looks like Redis)". It takes at most :data:`IDENTIFY_BUDGET` seconds: four letters that
ZooKeeper answers (``srvr``) and that Redis and HTTP servers answer with an error, then,
if that told nothing, an HTTP/2 greeting, which gRPC servers such as etcd answer with
their settings. Over TLS the addresses are only knocked (a probe in clear would only
find a TLS server).

No state; no thread: the asyncio functions run on the caller's loop.
"""

from __future__ import annotations

import asyncio
import errno
import os
import selectors
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._core.program import Program, run_program, run_program_async
from .errors import BackendUnavailable

__all__ = [
    "HTTP2",
    "IDENTIFY_BUDGET",
    "KNOCK_WAIT",
    "REDIS",
    "REFUSED",
    "ZOOKEEPER",
    "Knock",
    "diagnose",
    "diagnose_async",
    "refusal_error",
    "refuse_early",
    "refuse_early_async",
]

#: at most this long (seconds) the knock waits for an address that neither accepts nor
#: refuses (a dropped SYN), before leaving it to the client's connect timeout
KNOCK_WAIT = 1.0
#: at most this long (seconds) :func:`diagnose` spends telling what answered
IDENTIFY_BUDGET = 1.0

# What a server looks like, as the probes can tell it.
ZOOKEEPER = "ZooKeeper"
REDIS = "Redis"
HTTP2 = "etcd or another gRPC (HTTP/2) server"
HTTP = "an HTTP server"
TLS = "a TLS server"

ACCEPTED = "accepted"
SILENT = "silent"
REFUSED = "connection refused"

# four letters ZooKeeper answers (or says it may not answer); Redis and HTTP say "error"
_FOUR_LETTERS = b"srvr\r\n"
# the HTTP/2 connection preface and an empty SETTINGS frame
_HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_REPLY_LIMIT = 512
_IDLE_AFTER_REPLY = 0.05  # a reply that paused this long is complete enough to judge


@dataclass(frozen=True)
class Knock:
    """What one address did with a TCP connection: ``outcome`` is ACCEPTED, SILENT, or
    the words of its failure ("connection refused", "does not resolve: ...")."""

    address: str
    outcome: str

    @property
    def answered(self) -> bool:
        """Did it accept, or might it still (silent)? Otherwise it said no at once."""
        return self.outcome in (ACCEPTED, SILENT)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def refusal_error(store: str, knocks: Sequence[Knock]) -> BackendUnavailable | None:
    """BackendUnavailable naming each address and what it said, when every one of
    ``knocks`` said no at once (refused, did not resolve); else None."""
    if not knocks or any(k.answered for k in knocks):
        return None
    unique = list(_unique(knocks))
    said = "; ".join(f"{k.address}: {k.outcome}" for k in unique)
    if len(unique) > 1:
        return BackendUnavailable(f"cannot connect to {store}: every address said no: {said}")
    if unique[0].outcome == REFUSED:
        said += " (no server listens there)"
    return BackendUnavailable(f"cannot connect to {store}: {said}")


def _unique(knocks: Sequence[Knock]) -> Iterator[Knock]:
    seen: set[tuple[str, str]] = set()
    for one in knocks:
        if (one.address, one.outcome) not in seen:
            seen.add((one.address, one.outcome))
            yield one


def _failure(code: int) -> str:
    if code == errno.ECONNREFUSED:
        return REFUSED
    return os.strerror(code).lower()


# ---- the knock ------------------------------------------------------------------------
@dataclass(frozen=True)
class _Target:
    """One resolved address of a host: what a socket needs to connect there."""

    address: str  # the host as the URL wrote it, with its port
    family: int
    kind: int
    proto: int
    sockaddr: Any

    def socket(self) -> socket.socket:
        sock = socket.socket(self.family, self.kind, self.proto)
        sock.setblocking(False)
        return sock


def _resolved(address: str, rows: Sequence[tuple[Any, ...]]) -> list[_Target]:
    return [_Target(address, row[0], row[1], row[2], row[4]) for row in rows]


def _numeric(host: str, port: int) -> list[tuple[Any, ...]] | None:
    """``host``'s getaddrinfo rows when it is an IP address (no look-up), else None."""
    try:
        return list(
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        )
    except socket.gaierror:
        return None


def _targets(hosts: Sequence[tuple[str, int]]) -> tuple[list[_Target], list[Knock]]:
    """Each host's resolved addresses, and the knocks of the hosts that do not resolve."""
    targets: list[_Target] = []
    unresolved: list[Knock] = []
    for host, port in hosts:
        address = _address(host, port)
        try:
            targets += _resolved(address, socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            unresolved.append(Knock(address, f"does not resolve ({exc})"))
    return targets, unresolved


def knock(hosts: Sequence[tuple[str, int]], wait: float = KNOCK_WAIT) -> list[Knock]:
    """Connect to every address at once; return when one accepts, every one answered,
    or ``wait`` passed (those still silent: SILENT)."""
    targets, knocks = _targets(hosts)
    pending: dict[socket.socket, str] = {}
    with selectors.DefaultSelector() as selector:
        try:
            for target in targets:
                sock = target.socket()
                code = sock.connect_ex(target.sockaddr)
                if code in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
                    pending[sock] = target.address
                    selector.register(sock, selectors.EVENT_WRITE)
                else:
                    sock.close()
                    knocks.append(Knock(target.address, _failure(code)))
            end = time.monotonic() + wait
            while pending and not any(k.outcome == ACCEPTED for k in knocks):
                left = end - time.monotonic()
                if left <= 0:
                    break
                for key, _ in selector.select(left):
                    pending_socket = key.fileobj
                    assert isinstance(pending_socket, socket.socket)
                    selector.unregister(pending_socket)
                    code = pending_socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    address = pending.pop(pending_socket)
                    knocks.append(Knock(address, _failure(code) if code else ACCEPTED))
                    pending_socket.close()
        finally:
            for sock, address in pending.items():
                knocks.append(Knock(address, SILENT))
                sock.close()
    return knocks


async def knock_async(hosts: Sequence[tuple[str, int]], wait: float = KNOCK_WAIT) -> list[Knock]:
    """:func:`knock` on the running loop."""
    loop = asyncio.get_running_loop()
    knocks: list[Knock] = []
    targets: list[_Target] = []
    for host, port in hosts:
        address = _address(host, port)
        try:
            rows = _numeric(host, port)
            if rows is None:  # a name: resolved on the loop's executor
                rows = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            knocks.append(Knock(address, f"does not resolve ({exc})"))
            continue
        targets += _resolved(address, rows)

    async def one(target: _Target) -> Knock:
        sock = target.socket()
        try:
            await loop.sock_connect(sock, target.sockaddr)
        except OSError as exc:
            return Knock(target.address, _failure(exc.errno) if exc.errno else str(exc))
        finally:
            sock.close()
        return Knock(target.address, ACCEPTED)

    tasks = {asyncio.ensure_future(one(target)): target.address for target in targets}
    pending = set(tasks)
    end = loop.time() + wait
    try:
        while pending and not any(k.outcome == ACCEPTED for k in knocks):
            left = end - loop.time()
            if left <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            knocks.extend(task.result() for task in done)
    finally:
        for task in pending:
            task.cancel()
            knocks.append(Knock(tasks[task], SILENT))
        if pending:
            await asyncio.wait(pending)  # their sockets closed
    return knocks


def refuse_early(store: str, hosts: Sequence[tuple[str, int]]) -> None:
    """BackendUnavailable at once when every address of ``hosts`` refused (or does not
    resolve, or is unreachable); else return (within :data:`KNOCK_WAIT`)."""
    refusal = refusal_error(store, knock(hosts))
    if refusal is not None:
        raise refusal


async def refuse_early_async(store: str, hosts: Sequence[tuple[str, int]]) -> None:
    """:func:`refuse_early` on the running loop."""
    refusal = refusal_error(store, await knock_async(hosts))
    if refusal is not None:
        raise refusal


# ---- what answered ---------------------------------------------------------------------
def looks_like(reply: bytes) -> str | None:
    """What kind of server sent ``reply`` to one of the probes, if it can be told."""
    if b"Zookeeper version" in reply or b"not in the whitelist" in reply:
        return ZOOKEEPER
    if reply[:1] in (b"-", b"+") and b"\r\n" in reply:  # a RESP error or status
        return REDIS
    lowered = reply[:64].lower()
    if reply.startswith(b"HTTP/") or b"<!doctype html" in lowered or b"<html" in lowered:
        return HTTP
    if len(reply) >= 9 and reply[3] in (0x04, 0x07) and reply[4] in (0x00, 0x01):
        return HTTP2  # a SETTINGS (or GOAWAY) frame
    if reply[:2] == b"\x15\x03" or reply[:2] == b"\x16\x03":
        return TLS
    return None


def _exchange(host: str, port: int, probe: bytes, timeout: float) -> bytes:
    """Send ``probe`` on a new connection; what came back within ``timeout`` (b"" when
    nothing, or the connection failed)."""
    end = time.monotonic() + timeout
    reply = b""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(probe)
            while len(reply) < _REPLY_LIMIT:
                left = end - time.monotonic()
                if left <= 0:
                    break
                sock.settimeout(min(left, _IDLE_AFTER_REPLY) if reply else left)
                chunk = sock.recv(_REPLY_LIMIT)
                if not chunk:
                    break
                reply += chunk
    except OSError:  # socket.timeout included: what came so far is the answer
        pass
    return reply


async def _exchange_async(host: str, port: int, probe: bytes, timeout: float) -> bytes:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    reply = b""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(probe)
        await writer.drain()
        while len(reply) < _REPLY_LIMIT:
            left = end - loop.time()
            if left <= 0:
                break
            chunk = await asyncio.wait_for(
                reader.read(_REPLY_LIMIT), min(left, _IDLE_AFTER_REPLY) if reply else left
            )
            if not chunk:
                break
            reply += chunk
    except (OSError, asyncio.TimeoutError):
        pass
    finally:
        if writer is not None:
            writer.close()
    return reply


def _verdict(store: str, speaks: str, address: str, kind: str | None) -> str:
    if kind == speaks:
        return f"{address} speaks {store} but did not answer the client in time"
    if kind is None:
        return (
            f"{address} accepted the connection but does not speak the {store} protocol "
            "(or did not answer it in time)"
        )
    return f"{address} answered but does not speak {store} (it looks like {kind})"


def _said_at_once(knocks: Sequence[Knock]) -> list[str]:
    """The words for the knocks that did not accept."""
    words = []
    for k in _unique(knocks):
        if k.outcome == SILENT:
            words.append(f"{k.address}: no TCP answer")
        elif k.outcome != ACCEPTED:
            words.append(f"{k.address}: {k.outcome}")
    return words


def _accepted(hosts: Sequence[tuple[str, int]], knocks: Sequence[Knock]) -> list[tuple[str, int]]:
    accepted = {k.address for k in knocks if k.outcome == ACCEPTED}
    return [(h, p) for h, p in hosts if _address(h, p) in accepted]


@dataclass(frozen=True)
class _Knocking:
    """A request of :func:`_diagnosing`: :func:`knock` these hosts."""

    hosts: Sequence[tuple[str, int]]
    wait: float


@dataclass(frozen=True)
class _Probing:
    """A request of :func:`_diagnosing`: what ``host:port`` answers to ``probe``."""

    host: str
    port: int
    probe: bytes
    timeout: float


def _diagnosing(
    store: str, speaks: str, hosts: Sequence[tuple[str, int]], tls: bool
) -> Program[str]:
    """The program both faces of :func:`diagnose` run."""
    end = time.monotonic() + IDENTIFY_BUDGET
    knocks = yield _Knocking(hosts, IDENTIFY_BUDGET / 4)
    assert isinstance(knocks, list)
    words = _said_at_once(knocks)
    accepted = _accepted(hosts, knocks)
    for host, port in accepted:
        kind = None
        for probe in () if tls else (_FOUR_LETTERS, _HTTP2_GREETING):
            left = max((end - time.monotonic()) / (2 * len(accepted)), 0.05)
            reply = yield _Probing(host, port, probe, left)
            assert isinstance(reply, bytes)
            kind = looks_like(reply)
            if kind is not None:
                break
        words.append(_verdict(store, speaks, _address(host, port), kind))
    return "; ".join(words)


def diagnose(store: str, speaks: str, hosts: Sequence[tuple[str, int]], tls: bool) -> str:
    """What each address answered, in words, within :data:`IDENTIFY_BUDGET` seconds.
    ``speaks``: the kind the store's servers look like (:data:`ZOOKEEPER`...)."""

    def answer(request: object) -> object:
        if isinstance(request, _Knocking):
            return knock(request.hosts, request.wait)
        assert isinstance(request, _Probing)
        return _exchange(request.host, request.port, request.probe, request.timeout)

    return run_program(_diagnosing(store, speaks, hosts, tls), answer)


async def diagnose_async(
    store: str, speaks: str, hosts: Sequence[tuple[str, int]], tls: bool
) -> str:
    """:func:`diagnose` on the running loop."""

    async def answer(request: object) -> object:
        if isinstance(request, _Knocking):
            return await knock_async(request.hosts, request.wait)
        assert isinstance(request, _Probing)
        return await _exchange_async(request.host, request.port, request.probe, request.timeout)

    return await run_program_async(_diagnosing(store, speaks, hosts, tls), answer)
