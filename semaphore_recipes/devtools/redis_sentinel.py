"""A Sentinel-managed Redis set on loopback, for development and tests: a primary, one
replica and three sentinels (quorum 2), each process in a directory of its own.

The sentinels mark a primary down after ``DOWN_AFTER_MS`` without an answer and fail
over within ``FAILOVER_TIMEOUT_MS``; each rewrites its own configuration file (written
once, in its directory). :meth:`RedisSentinelSet.kill_primary` SIGKILLs the current
primary and :meth:`RedisSentinelSet.wait_for_new_primary` waits until the sentinels
name another one and it serves as a primary. Only the standard library is imported
here; the processes are :class:`~semaphore_recipes.devtools.redis_server.RedisServer`
(the data nodes) and :class:`SentinelServer` (the same ``redis-server`` binary, run
with ``--sentinel``), with their handling (log, cleanup at exit) from
:mod:`~semaphore_recipes.devtools.processes`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TypeVar

from .processes import ManagedProcess, ProcessGroup
from .redis_server import RedisServer

__all__ = ["DOWN_AFTER_MS", "FAILOVER_TIMEOUT_MS", "SERVICE", "RedisSentinelSet", "SentinelServer"]

#: the name the sentinels monitor the primary under
SERVICE = "mymaster"
#: short, so that tests see a failover within seconds
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
QUORUM = 2

_Set = TypeVar("_Set", bound="RedisSentinelSet")


class SentinelServer(RedisServer):
    """One sentinel on 127.0.0.1 (``host_port``) watching ``primary`` as :data:`SERVICE`."""

    def __init__(
        self,
        *,
        primary: str,
        workdir: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        failover_timeout_ms: int = FAILOVER_TIMEOUT_MS,
        down_after_ms: int = DOWN_AFTER_MS,
    ) -> None:
        super().__init__(workdir=workdir, binary=binary)
        self.primary = primary
        self.failover_timeout_ms = failover_timeout_ms
        self.down_after_ms = down_after_ms
        self.conf_path = self.workdir / "sentinel.conf"

    @property
    def label(self) -> str:
        return f"redis sentinel on {self.host_port}"

    def prepare(self) -> None:
        if self.conf_path.exists():  # (the sentinel's own rewrite: what it learned)
            return
        host, _, port = self.primary.rpartition(":")
        self.conf_path.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.workdir}\n"
            f"sentinel monitor {SERVICE} {host} {port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )

    def command(self) -> list[str]:
        return [self.binary, str(self.conf_path), "--sentinel"]

    def probe_ready(self) -> str | None:
        return "sentinel" if self.command_reply(b"PING") == "+PONG" else None

    def primary_address(self) -> str | None:
        """``host:port`` of the primary this sentinel names now (None: no answer)."""
        reply = self.command_reply(
            f"SENTINEL get-master-addr-by-name {SERVICE}".encode(), whole=True
        )
        lines = [line for line in (reply or "").splitlines() if not line.startswith(("*", "$"))]
        return f"{lines[0]}:{lines[1]}" if len(lines) == 2 else None

    def master_state(self) -> dict[str, str]:
        """``SENTINEL master`` of :data:`SERVICE`, as field -> value ({} when no answer)."""
        reply = self.command_reply(f"SENTINEL master {SERVICE}".encode(), whole=True) or ""
        lines = [line for line in reply.splitlines() if not line.startswith(("*", "$"))]
        return dict(zip(lines[::2], lines[1::2], strict=False))


class RedisSentinelSet(ProcessGroup):
    """A primary, one replica and three sentinels on loopback (free ports).

    ``replica_link``: the address the replica replicates from instead of the primary's
    (a fault proxy in front of it, to make replication lag); the sentinels correct a
    replica that replicates from an address other than the primary's once
    ``failover_timeout_ms`` passed, so such a test gives a long one (a failover itself
    does not wait for it).

    ``down_after_ms``: longer where a failover the test did not cause (a node slow to
    answer on a loaded machine) would spoil it. ``persistent`` and ``node_args`` are
    passed to both data nodes (:class:`~semaphore_recipes.devtools.redis_server.RedisServer`'s
    ``persistent`` and ``extra_args``)."""

    def __init__(
        self,
        *,
        workdir: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        replica_link: str | None = None,
        failover_timeout_ms: int = FAILOVER_TIMEOUT_MS,
        down_after_ms: int = DOWN_AFTER_MS,
        persistent: bool = False,
        node_args: Sequence[str] = (),
    ) -> None:
        super().__init__(workdir=workdir, temp_prefix="redis-sentinel-")
        first = RedisServer(
            workdir=self.workdir / "node0", persistent=persistent, extra_args=node_args,
            binary=binary,
        )  # fmt: skip
        self.nodes = [
            first,
            RedisServer(
                workdir=self.workdir / "node1",
                replica_of=replica_link or first.host_port,
                persistent=persistent,
                extra_args=node_args,
                binary=binary,
            ),
        ]
        self.sentinels = [
            SentinelServer(primary=first.host_port, workdir=self.workdir / f"sentinel{i}",
                           binary=binary, failover_timeout_ms=failover_timeout_ms,
                           down_after_ms=down_after_ms)
            for i in range(3)
        ]  # fmt: skip

    #: the name the sentinels know the primary by
    service = SERVICE

    @property
    def processes(self) -> Sequence[ManagedProcess]:
        return [*self.nodes, *self.sentinels]

    @property
    def sentinel_hosts(self) -> str:
        """``host:port,...`` of the sentinels, as a URL names them."""
        return ",".join(s.host_port for s in self.sentinels)

    def url(self, query: str = "", *, db: int = 0) -> str:
        """A ``redis+sentinel://`` URL of this set (``query`` without its ``?``)."""
        return f"redis+sentinel://{self.sentinel_hosts}/{SERVICE}/{db}" + (
            f"?{query}" if query else ""
        )

    def start(self: _Set, timeout: float = 60.0) -> _Set:
        """Start the nodes, then the sentinels; ready once every sentinel knows the
        replica and the two other sentinels (a failover needs them)."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            node.start(max(1.0, deadline - time.monotonic()))
        for sentinel in self.sentinels:
            sentinel.spawn()
        for sentinel in self.sentinels:
            sentinel.wait_ready(max(1.0, deadline - time.monotonic()))
        self.wait_settled(deadline - time.monotonic())
        return self

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Wait until each running sentinel names the same serving primary and knows
        its replicas and the other running sentinels (TimeoutError, naming what it
        last saw, if not within ``timeout``)."""
        deadline = time.monotonic() + timeout
        seen: object = None
        while True:
            running = [s for s in self.sentinels if s.running]
            states = [s.master_state() for s in running]
            replicas = sum(1 for node in self.nodes if node.running) - 1
            addresses = {f"{st.get('ip')}:{st.get('port')}" for st in states}
            primary = self.node_at(next(iter(addresses))) if len(addresses) == 1 else None
            if (
                primary is not None
                and primary.running
                and all(
                    st.get("flags") == "master"
                    and int(st.get("num-slaves", -1)) >= replicas
                    and int(st.get("num-other-sentinels", -1)) >= len(running) - 1
                    for st in states
                )
                and "role:master" in (primary.command_reply(b"INFO replication", whole=True) or "")
            ):
                return
            seen = states
            if time.monotonic() > deadline:
                raise TimeoutError(f"the sentinel set did not settle: {seen}")
            time.sleep(0.1)

    def replicated(self) -> bool:
        """Whether every running replica has every write of the primary (by offset)."""
        offsets = {}
        for node in self.nodes:
            if node.running:
                info = node.command_reply(b"INFO replication", whole=True) or ""
                fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
                offsets[node.host_port] = fields.get("master_repl_offset")
        return None not in offsets.values() and len(set(offsets.values())) == 1

    def node_at(self, address: str) -> RedisServer | None:
        """The data node at ``host:port``, if it is one of this set's."""
        return next((node for node in self.nodes if node.host_port == address), None)

    def primary_address(self) -> str | None:
        """``host:port`` of the primary the first answering sentinel names."""
        for sentinel in self.sentinels:
            if sentinel.running:
                found = sentinel.primary_address()
                if found is not None:
                    return found
        return None

    def primary(self) -> RedisServer:
        """The data node the sentinels name as primary now."""
        address = self.primary_address()
        node = self.node_at(address) if address is not None else None
        if node is None:
            raise RuntimeError(f"the sentinels name no primary of this set ({address})")
        return node

    def replicas(self) -> list[RedisServer]:
        primary = self.primary()
        return [node for node in self.nodes if node is not primary]

    def kill_primary(self) -> RedisServer:
        """SIGKILL the current primary (a crash: what it did not replicate is lost);
        the killed node."""
        node = self.primary()
        node.kill()
        return node

    def wait_for_new_primary(self, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until every running sentinel names a primary other than ``old`` and it
        serves as one; that node (TimeoutError if not within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            named = {s.primary_address() for s in self.sentinels if s.running}
            if len(named) == 1:
                node = self.node_at(str(next(iter(named))))
                info = node.command_reply(b"INFO replication", whole=True) if node else None
                if node is not None and node is not old and "role:master" in (info or ""):
                    return node
            if time.monotonic() > deadline:
                raise TimeoutError(f"no new primary within {timeout} s (sentinels name {named})")
            time.sleep(0.05)

    def rejoin(self, node: RedisServer, timeout: float = 30.0) -> None:
        """Start a killed data node again as a replica of the current primary, and wait
        until the sentinels count it."""
        node.replica_of = self.primary().host_port
        node.start(timeout)
        self.wait_settled(timeout)
