"""Script calls as values, and the two runners that make them: one program, two faces.

A Redis program (``_core.program``) yields :class:`Eval` (run a script of
:mod:`.scripts`), :class:`Command` (one plain command), :class:`Pause` (wait before
trying again) or :class:`Soon` (start a follow-up program) and receives the reply, or
has the client's exception thrown in. :class:`SyncRunner` answers on a ``redis.Redis``
(blocking), :class:`AsyncRunner` on a ``redis.asyncio.Redis`` (awaited): they are the
backend's runner (``RedisBackend.run``/``run_async``). :func:`call` is the one retry
policy: a connection error is tried again within the bound, then becomes
BackendUnavailable (AcquireTimeout for a waiting acquire's deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._bounded_await import Bounds
from ..backend import Deadline, Program, run_program, run_program_async
from ..errors import (
    AcquireTimeout,
    AuthenticationFailed,
    BackendUnavailable,
    PermissionDenied,
    SemaphoreError,
)
from .clients import async_client, close_async, close_sync, sync_client
from .connections import AsyncIdleConnections, AsyncTurns, IdleConnections
from .params import RedisParams
from .scripts import READ_ONLY, SCRIPTS, ScriptName
from .wire import exchange, plain_socket

__all__ = [
    "REFUSED",
    "AsyncRunner",
    "Command",
    "Eval",
    "Pause",
    "Soon",
    "SyncRunner",
    "call",
    "command",
    "retried",
    "translate",
]

T = TypeVar("T")

#: how long a failed call waits before it is sent again
RETRY_PAUSE = 0.1
Arg = str | int | float | bytes


@dataclass(frozen=True)
class Eval:
    """Run script ``name`` with ``args`` (the prefix first: see :mod:`.scripts`).

    With ``replicas``, ``WAIT replicas wait_ms`` follows on the same connection, and the
    answer is ``(reply, replicas that acknowledged)``: every write the server made
    before the script's, and the script's, reached that many replicas."""

    name: ScriptName
    args: tuple[Arg, ...]
    replicas: int = 0
    wait_ms: int = 0
    #: a waiting acquire's time left (None: the socket's timeout, the request timeout):
    #: a silent server must not keep the caller past its deadline
    timeout: float | None = None


@dataclass(frozen=True)
class Command:
    """Send one plain command (``GET``, ``SCAN``, ``DEL``: ``args``, its name first);
    the answer is its reply as the client parses it. ``key``: on Redis Cluster, the
    command goes to the node serving that key's slot (a ``SCAN`` names no key)."""

    args: tuple[Arg, ...]
    key: str | None = None


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds`` (before sending a call again)."""

    seconds: float


@dataclass(frozen=True)
class Soon:
    """Start ``program()`` once the step that yields this is over, not waiting for it
    (the answer is None); ``failed()`` when it ends with a SemaphoreError. The asyncio
    runner starts it on the loop's next turn, once the awaiting task has ended its
    step; the blocking runner runs it at once (its caller, a thread, has nothing of
    its own to end first)."""

    program: Callable[[], Program[object]]
    failed: Callable[[], None]


TRANSIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
#: a server's refusal (an ACL, a bad argument): sending it again does not help
REFUSED = redis.exceptions.ResponseError


#: what a server that wants a password answers a client that sent none
_NO_CREDENTIALS = ("NOAUTH", "HELLO must be called with the client already authenticated")


def translate(exc: BaseException, where: str, params: RedisParams | None = None) -> BaseException:
    """The library's error for a redis-py one (the caller raises it ``from`` it).
    ``params``, the URL's, name its user (Redis's ``default`` user when it names none)
    and its server in an authentication error."""
    user = (params.username or "default") if params is not None else None
    text = str(exc)
    if isinstance(exc, redis.exceptions.AuthenticationError) or text.startswith("NOAUTH"):
        server = f"{params.address}/{params.db}" if params is not None else where
        if params is not None and params.password is None and text.startswith(_NO_CREDENTIALS):
            text = (
                "the server requires a password and the URL gives none "
                "(redis://:PASSWORD@host or redis://USER:PASSWORD@host)"
            )
        return AuthenticationFailed("redis", user, server, text)
    if isinstance(exc, redis.exceptions.NoPermissionError) or (
        # (inside a script: a command, or a key outside the user's patterns)
        "NOPERM" in text or "can't run this command" in text or "can't access" in text
    ):
        return PermissionDenied("redis", user, where, text)
    if "DB index is out of range" in text:
        # the URL's /db is above the server's `databases` setting: bad input, not an
        # outage (known only from the server's reply to SELECT)
        return ValueError(
            f"{where}: the URL's database number is out of this server's range "
            f"({exc}; its `databases` setting, 16 by default: 0..15)"
        )
    return BackendUnavailable(f"{where}: {exc}")


def call(
    name: ScriptName,
    args: tuple[Arg, ...],
    *,
    where: str,
    bound: Deadline,
    waiting: bool = False,
    retry: bool = True,
    params: RedisParams | None = None,
    replicas: int = 0,
    max_wait: float = 0.0,
) -> Program[Any]:
    """Run one script, sent again after a connection error until ``bound`` passes
    (scripts are written so that a second run after a lost reply does no harm; a
    fenced commit is not, and passes ``retry=False``). With ``replicas``, a WAIT for
    them follows on the same connection, for at most half of ``max_wait`` (the request
    timeout) and of the time left. When the bound passes:
    AcquireTimeout if it is a waiting acquire's deadline (``waiting``), else
    BackendUnavailable. ``params``: the URL's (:func:`translate`)."""

    def request() -> Eval:
        # (half the time left: the WAIT's reply must beat the socket's timeout)
        wait_ms = (int(bound.cap(max_wait) * 500) or 1) if replicas else 0
        timeout = bound.remaining() if waiting else None
        return Eval(name, args, replicas, wait_ms, timeout)

    return (yield from retried(request, where, bound, waiting=waiting, retry=retry, params=params))


def retried(
    request: Callable[[], Eval | Command],
    where: str,
    bound: Deadline,
    *,
    waiting: bool = False,
    retry: bool = True,
    params: RedisParams | None = None,
) -> Program[Any]:
    """Send ``request()`` until it is answered: :func:`call`'s policy (a refusal or
    a wrong password is not sent again)."""
    while True:
        try:
            return (yield request())
        except TRANSIENT as exc:
            if (
                not retry
                or bound.expired()
                or isinstance(exc, redis.exceptions.AuthenticationError)
            ):
                if waiting and not isinstance(exc, redis.exceptions.AuthenticationError):
                    raise AcquireTimeout(f"{where}: unreachable ({exc})") from exc
                raise translate(exc, where, params) from exc
            yield Pause(bound.cap(RETRY_PAUSE))
        except redis.exceptions.ResponseError as exc:
            raise translate(exc, where, params) from exc


def command(
    args: tuple[Arg, ...], where: str, params: RedisParams, key: str | None = None
) -> Program[Any]:
    """Send one plain command (:class:`Command`, to ``key``'s node on a cluster), not
    sent again (a read, a delete of data keys): the library's error for the client's
    (:func:`translate`)."""
    try:
        return (yield Command(args, key))
    except (*TRANSIENT, redis.exceptions.ResponseError) as exc:
        raise translate(exc, where, params) from exc


def pack(*args: Arg) -> bytes:
    """One command in the protocol's encoding, as redis-py's default encoder sends it
    (UTF-8 text, numbers as their ``repr``)."""
    return b"*%d\r\n" % len(args) + _packed_args(args)


def _packed_args(args: tuple[Arg, ...]) -> bytes:
    out = []
    for arg in args:
        if arg.__class__ is bytes:  # (the common cases first: checked by exact class)
            pass
        elif arg.__class__ is str:
            arg = arg.encode()
        elif arg.__class__ is int:
            arg = b"%d" % arg
        elif isinstance(arg, str):
            arg = arg.encode()
        elif not isinstance(arg, bytes):
            arg = repr(arg).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(arg), arg))
    return b"".join(out)


#: the packed start of an EVALSHA (its length, the verb, the hash and the key count) by
#: (hash, keys, arguments): the same few for every call of a script
_EVALSHA_HEADS: dict[tuple[str, int, int], bytes] = {}


def evalsha_packed(sha: str, keys: tuple[str, ...], args: tuple[Arg, ...]) -> bytes:
    """``pack(b"EVALSHA", sha, len(keys), *keys, *args)``, its start made once."""
    shape = (sha, len(keys), len(args))
    head = _EVALSHA_HEADS.get(shape)
    if head is None:
        head = pack(b"EVALSHA", sha, len(keys))
        head = _EVALSHA_HEADS[shape] = b"*%d" % (3 + len(keys) + len(args)) + head[2:]
    return head + _packed_args((*keys, *args))


def evalsha_on(
    conn: Any, sha: str, keys: tuple[str, ...], args: tuple[Arg, ...], timeout: float | None
) -> Any:
    """EVALSHA on the blocking connection ``conn``, its reply awaited at most ``timeout``
    seconds (None: the socket's own timeout). A connection whose reply was not read
    whole (no reply in time, an interrupt) is closed: a late reply would be read as
    the next command's; an error reply was read whole, and the connection goes on."""
    try:
        sock = plain_socket(conn)
        if sock is not None:  # (:mod:`.wire`: without redis-py's reader)
            return exchange(sock, evalsha_packed(sha, keys, args), timeout)
        conn.send_packed_command([evalsha_packed(sha, keys, args)])
        if timeout is not None and not conn.can_read(timeout=timeout):
            conn.disconnect()
            raise redis.exceptions.TimeoutError(f"no reply within {timeout:.2f} s")
        return conn.read_response()
    except redis.exceptions.ResponseError:
        raise
    except BaseException:
        conn.disconnect()
        raise


def lacks_read_only_verbs(exc: redis.exceptions.ResponseError) -> bool:
    """Whether ``exc`` is a server before Redis 7 refusing ``EVALSHA_RO``/``EVAL_RO``:
    the runner then sends the read-only scripts as ``EVALSHA`` (they only read)."""
    return "unknown command" in str(exc).lower()


def no_retries() -> Retry:
    """The client's own retries are off: :func:`call` decides what is sent again."""
    return Retry(NoBackoff(), 0)


def routing(eval_: Eval) -> tuple[str, ...]:
    """The keys an EVALSHA of ``eval_`` declares: on Redis Cluster the counter of its
    prefix (the first argument), which routes the call to that prefix's slot
    (:mod:`.layout`); the scripts read only ``ARGV``."""
    prefix = eval_.args[0]
    return (f"{prefix.decode() if isinstance(prefix, bytes) else prefix}:seq",)


class SyncRunner:
    """Runs programs on a blocking ``redis.Redis`` (``redis.RedisCluster``)."""

    def __init__(self, params: RedisParams) -> None:
        self.cluster = params.cluster
        self.client: Any = sync_client(params, no_retries())
        self._scripts = {name: self.client.register_script(src) for name, src in SCRIPTS.items()}
        self._socket_timeout = params.request_timeout
        self._read_only_verbs = True  # (False: a server before Redis 7 has no EVALSHA_RO)
        # (one server: a cluster's calls go through its client, which follows the slots)
        self._connections: IdleConnections | None = (
            None if params.cluster else IdleConnections(self.client)
        )

    def _node_client(self, keys: tuple[str, ...]) -> Any:
        """The ``redis.Redis`` of the server that serves ``keys``."""
        if not self.cluster:
            return self.client
        return self.client.get_node_from_key(keys[0]).redis_connection

    def run(self, program: Program[T]) -> T:
        return run_program(program, self._answer)

    def _answer(self, pending: object) -> object:
        if isinstance(pending, Eval):
            keys = routing(pending) if self.cluster else ()
            if pending.name in READ_ONLY and self._read_only_verbs:
                try:
                    return self._read_only(self._scripts[pending.name], keys, pending.args)
                except redis.exceptions.ResponseError as exc:
                    if not lacks_read_only_verbs(exc):
                        raise
                    self._read_only_verbs = False
            if not pending.replicas:
                script = self._scripts[pending.name]
                try:
                    if self.cluster:
                        timeout = pending.timeout
                        return self._evalsha_on_node(script.sha, keys, pending.args, timeout)
                    return self._evalsha(script.sha, pending.args, pending.timeout)
                except redis.exceptions.NoScriptError:  # a restarted server: load, run
                    return script(keys=keys, args=pending.args)
            node = self._node_client(keys)
            with node.pipeline(transaction=False) as pipe:  # one connection
                self._scripts[pending.name](keys=keys, args=list(pending.args), client=pipe)
                pipe.wait(pending.replicas, pending.wait_ms)
                reply, acknowledged = pipe.execute()
            return reply, acknowledged
        if isinstance(pending, Pause):
            time.sleep(pending.seconds)
            return None
        if isinstance(pending, Command):
            if pending.key is not None and self.cluster:
                return self._node_client((pending.key,)).execute_command(*pending.args)
            return self.client.execute_command(*pending.args)
        assert isinstance(pending, Soon)
        try:
            self.run(pending.program())
        except SemaphoreError:
            pending.failed()
        return None

    def _read_only(self, script: Any, keys: tuple[str, ...], args: tuple[Arg, ...]) -> Any:
        """A script of :data:`.scripts.READ_ONLY` as ``EVALSHA_RO`` (``EVAL_RO`` with its
        source when the server does not have it: no ``SCRIPT LOAD``, a write a reader
        may not make), within the socket's timeout (the request timeout)."""
        try:
            return self.client.execute_command("EVALSHA_RO", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return self.client.execute_command("EVAL_RO", script.script, len(keys), *keys, *args)

    def _evalsha_on_node(
        self, sha: str, keys: tuple[str, ...], args: tuple[Arg, ...], timeout: float | None
    ) -> Any:
        """EVALSHA on Redis Cluster: through the cluster client (it follows a slot's
        move), or, for a reply awaited less than the socket's timeout, on a connection
        of the node serving ``keys`` whose reply is awaited that long (a connection that
        missed it is closed: a late reply would be read as the next command's)."""
        if timeout is None or timeout >= self._socket_timeout:
            return self.client.evalsha(sha, len(keys), *keys, *args)
        pool = self._node_client(keys).connection_pool
        conn: Any = pool.get_connection()  # (redis-py's connection methods are untyped)
        try:
            return evalsha_on(conn, sha, keys, args, timeout)
        finally:
            pool.release(conn)

    def _evalsha(self, sha: str, args: tuple[Arg, ...], timeout: float | None) -> Any:
        """EVALSHA on an idle connection of this runner (:mod:`.connections`), its reply
        awaited at most ``timeout`` seconds when that is below the socket's own timeout
        (the request timeout). A connection whose reply was not read whole is closed,
        since a late reply would be read as the next command's. (The connection itself,
        not the client's command path: its wrappers, pool, event dispatch and argument
        encoding cost each call more than the call's own work; :func:`pack` encodes as
        the client does, and :mod:`.wire` reads the reply on a plain connection.)"""
        assert self._connections is not None  # (one server)
        conn = self._connections.take()
        within = timeout if timeout is not None and timeout < self._socket_timeout else None
        try:
            return evalsha_on(conn, sha, (), args, within)
        finally:
            self._connections.give_back(conn)

    def close(self) -> None:
        if self._connections is not None:
            self._connections.close()
        close_sync(self.client)


class AsyncRunner:
    """Runs programs on a ``redis.asyncio.Redis`` (``RedisCluster``), awaited (the
    asyncio face)."""

    def __init__(self, params: RedisParams) -> None:
        self.cluster = params.cluster
        self.client: Any = async_client(params, AsyncRetry(NoBackoff(), 0))
        self._request_timeout = params.request_timeout
        # every call out takes one of these turns: a taken connection of its own, or a
        # call through the client's pool, which has no limit (:mod:`.connections`)
        self._turns = AsyncTurns()
        # (one server: a cluster's calls go through its client, which follows slots)
        self._connections: AsyncIdleConnections | None = (
            None if params.cluster else AsyncIdleConnections(self.client, self._turns)
        )
        self._scripts = {name: self.client.register_script(src) for name, src in SCRIPTS.items()}
        self._soon: set[asyncio.Task[None]] = set()  # (a task nobody holds may be collected)
        self._bounds = Bounds()  # every call's bound, on one timer
        self._closed = False
        self._read_only_verbs = True  # (as the SyncRunner's)

    async def run(self, program: Program[T]) -> T:
        return await run_program_async(program, self._answer)

    async def _answer(self, pending: object) -> object:
        if isinstance(pending, Eval):
            keys = routing(pending) if self.cluster else ()
            if pending.name in READ_ONLY and self._read_only_verbs:
                try:
                    return await self._read_only(self._scripts[pending.name], keys, pending.args)
                except redis.exceptions.ResponseError as exc:
                    if not lacks_read_only_verbs(exc):
                        raise
                    self._read_only_verbs = False
            if pending.replicas and self.cluster:
                return await self._with_wait_on_node(pending, keys)
            if not pending.replicas:
                script = self._scripts[pending.name]
                try:
                    if self.cluster:
                        return await self._evalsha_on_cluster(script.sha, keys, pending)
                    return await self._evalsha(script.sha, pending.args, pending.timeout)
                except redis.exceptions.NoScriptError:  # a restarted server: load, run
                    async with self._turn():
                        return await script(keys=keys, args=list(pending.args))
            async with self._turn(), self.client.pipeline(transaction=False) as pipe:
                await self._scripts[pending.name](args=list(pending.args), client=pipe)
                pipe.wait(pending.replicas, pending.wait_ms)  # (on the script's connection)
                reply, acknowledged = await pipe.execute()
            return reply, acknowledged
        if isinstance(pending, Pause):
            await asyncio.sleep(pending.seconds)
            return None
        if isinstance(pending, Command):
            if pending.key is not None and self.cluster:
                await self.client.initialize()  # (the slots mapped: once)
                node = self.client.get_node_from_key(pending.key)
                # (the node's own reply: the cluster's answers a SCAN per node)
                async with self._turn():
                    return await node.execute_command(*pending.args)
            async with self._turn():
                return await self.client.execute_command(*pending.args)
        assert isinstance(pending, Soon)
        asyncio.get_running_loop().call_soon(self._start, pending)
        return None

    async def _read_only(self, script: Any, keys: tuple[str, ...], args: tuple[Arg, ...]) -> Any:
        """As :meth:`SyncRunner._read_only`, awaited."""
        client = self.client
        async with self._turn():
            try:
                return await client.execute_command(
                    "EVALSHA_RO", script.sha, len(keys), *keys, *args
                )
            except redis.exceptions.NoScriptError:
                return await client.execute_command(
                    "EVAL_RO", script.script, len(keys), *keys, *args
                )

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """One of the runner's turns for a call through the client's own pool (on a
        cluster, a pool per node), which has no limit, waited for at most the request
        timeout, as the call's own reply is."""
        try:
            await self._turns.take(self._request_timeout)
        except TimeoutError:
            raise redis.exceptions.TimeoutError(
                f"no turn of this client free within {self._request_timeout:.2f} s"
            ) from None
        try:
            yield
        finally:
            self._turns.give_back()

    async def _with_wait_on_node(self, pending: Eval, keys: tuple[str, ...]) -> object:
        """The script then ``WAIT`` on one connection of the node serving ``keys`` (a
        cluster pipeline refuses EVALSHA; WAIT counts the writes of its connection)."""
        await self.client.initialize()
        node = self.client.get_node_from_key(keys[0])
        script = self._scripts[pending.name]
        async with self._turn():
            conn = node.acquire_connection()
            try:
                for attempt in range(2):
                    commands = [
                        ("EVALSHA", script.sha, len(keys), *keys, *pending.args),
                        ("WAIT", pending.replicas, pending.wait_ms),
                    ]
                    await conn.send_packed_command(conn.pack_commands(commands))
                    try:
                        reply = await conn.read_response()
                    except redis.exceptions.NoScriptError:
                        await conn.read_response()  # (the WAIT's reply: the connection goes on)
                        if attempt:
                            raise
                        await self.client.script_load(script.script)  # (a promoted replica)
                        continue
                    acknowledged = await conn.read_response()
                    return reply, acknowledged
                raise AssertionError("unreachable")
            except BaseException:
                await conn.disconnect()
                raise
            finally:
                node.release(conn)

    async def _evalsha_on_cluster(self, sha: str, keys: tuple[str, ...], pending: Eval) -> Any:
        """EVALSHA through the cluster client (it follows a slot's move), its reply
        awaited at most the call's time left (a cancelled command closes its
        connection: no late reply is read)."""
        async with self._turn():
            reply = self.client.evalsha(sha, len(keys), *keys, *pending.args)
            if pending.timeout is None:
                return await reply
            try:
                return await self._bounds.bounded(reply, pending.timeout)
            except asyncio.TimeoutError:
                late = f"no reply within {pending.timeout:.2f} s"
                raise redis.exceptions.TimeoutError(late) from None

    async def _evalsha(self, sha: str, args: tuple[Arg, ...], timeout: float | None) -> Any:
        """EVALSHA on an idle connection of this runner (as :meth:`SyncRunner._evalsha`),
        sent and its reply read within ``timeout`` seconds (None: the request timeout),
        one bound for both (the runner's connections have no socket timeout). A
        connection whose reply was not read whole closes itself (redis-py's asyncio
        connections do on any exception, a cancellation too): no late reply is read."""
        assert self._connections is not None  # (one server)
        started = time.monotonic()
        try:  # (the wait for one of the runner's connections counts in the timeout)
            conn = await self._connections.take(timeout)
        except TimeoutError:
            raise redis.exceptions.TimeoutError(
                f"no connection of this client free within {timeout:.2f} s"
            ) from None
        # (a call's own timeout counts the wait for its turn; the request timeout, for
        # a call with none, starts once it has a connection, as a socket timeout would)
        if timeout is None:
            bound = self._request_timeout
        else:
            bound = max(0.0, timeout - (time.monotonic() - started))
        try:
            exchange = exchange_on(conn, evalsha_packed(sha, (), args))
            return await self._bounds.bounded(exchange, bound)
        except asyncio.TimeoutError:
            raise redis.exceptions.TimeoutError(f"no reply within {bound:.2f} s") from None
        finally:
            await self._connections.give_back(conn)

    def _start(self, soon: Soon) -> None:
        """(On the loop, once the task that asked for ``soon`` has ended its step.)"""
        if self._closed:  # the backend's close ended the session: nothing to follow up
            return
        task = asyncio.get_running_loop().create_task(self._follow_up(soon))
        self._soon.add(task)
        task.add_done_callback(self._soon.discard)

    async def _follow_up(self, soon: Soon) -> None:
        try:
            await self.run(soon.program())
        except SemaphoreError:
            soon.failed()

    async def close(self) -> None:
        self._closed = True
        if self._connections is not None:
            await self._connections.close()
        await close_async(self.client)


async def exchange_on(conn: Any, packed: bytes) -> Any:
    """Send one packed command on an asyncio connection and read its reply (a
    connection whose reply was not read whole, cancelled too, closes itself: redis-py's
    asyncio connections do on any exception)."""
    await conn.send_packed_command([packed])
    return await conn.read_response()
