"""A real Redis Cluster on loopback, for development and tests.

``primaries`` nodes share the 16384 hash slots in equal ranges, each with
``replicas_per_primary`` replicas, every node a :class:`~.redis_server.RedisServer`
started with ``--cluster-enabled`` in a work directory of its own. The nodes are
joined with plain commands (``CLUSTER MEET``, ``ADDSLOTSRANGE``, ``REPLICATE``), not
``redis-cli --cluster create``: nothing but ``redis-server`` is needed. Ready when every
node says ``cluster_state:ok`` and knows every other node. :meth:`kill_primary_of`
SIGKILLs the primary of a key's slot and :meth:`wait_for_failover` waits until a
replica took its slots (after ``node_timeout_ms``, then an election). Only the
standard library is imported here (and the library's slot arithmetic,
:func:`semaphore_recipes.redis.layout.key_slot`, itself standard library only).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ..redis.layout import SLOTS, key_slot
from .redis_server import RedisServer

__all__ = ["RedisCluster", "key_slot"]


class RedisCluster:
    """``primaries`` primaries with ``replicas_per_primary`` replicas each."""

    def __init__(
        self,
        *,
        primaries: int = 3,
        replicas_per_primary: int = 1,
        node_timeout_ms: int = 2000,
        persistent: bool = False,
    ) -> None:
        if primaries < 1 or replicas_per_primary < 0:
            raise ValueError("a cluster has at least one primary and no negative replicas")
        self.node_timeout_ms = node_timeout_ms
        self.nodes = [
            RedisServer(cluster_node_timeout_ms=node_timeout_ms, persistent=persistent)
            for _ in range(primaries * (1 + replicas_per_primary))
        ]
        self.primaries = primaries
        self.replicas_per_primary = replicas_per_primary

    @property
    def startup_nodes(self) -> list[str]:
        """``host:port`` of every node (a client needs any one of them)."""
        return [node.host_port for node in self.nodes]

    def start(self, timeout: float = 60.0) -> RedisCluster:
        end = time.monotonic() + timeout
        for node in self.nodes:
            node.spawn()
        for node in self.nodes:
            node.wait_ready(max(1.0, end - time.monotonic()))
        ids = [self._reply(node, "CLUSTER MYID") for node in self.nodes]
        first = self.nodes[0]
        for node in self.nodes[1:]:
            self._reply(first, f"CLUSTER MEET 127.0.0.1 {node.port}")
        per = SLOTS // self.primaries
        for i, node in enumerate(self.nodes[: self.primaries]):
            low = i * per
            high = SLOTS - 1 if i == self.primaries - 1 else low + per - 1
            self._reply(node, f"CLUSTER ADDSLOTSRANGE {low} {high}")
        self._wait(end, lambda node: self._knows(node, len(self.nodes)))
        for j, node in enumerate(self.nodes[self.primaries :]):
            primary_id = ids[j % self.primaries]
            self._retry(end, node, f"CLUSTER REPLICATE {primary_id}")
        self._wait(end, self._serving)
        return self

    def start_or_close(self, timeout: float = 60.0) -> RedisCluster:
        try:
            return self.start(timeout)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> RedisCluster:
        return self.start_or_close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- faults -----------------------------------------------------------------------
    def primary_of(self, key: str) -> RedisServer:
        """The running node that serves ``key``'s slot now (as the nodes say)."""
        slot = key_slot(key)
        for node in self._running():
            for line in (self._reply(node, "CLUSTER NODES", whole=True) or "").splitlines():
                fields = line.split()
                mine = "myself" in fields[2] and "master" in fields[2]
                if mine and any(_covers(part, slot) for part in fields[8:]):
                    return node
        raise RuntimeError(f"no running node serves slot {slot} of {key!r}")

    def kill_primary_of(self, key: str) -> RedisServer:
        """SIGKILL the primary serving ``key``; returns it (``start()`` brings it back,
        as a replica once another took its slots)."""
        node = self.primary_of(key)
        node.kill()
        return node

    def wait_for_failover(self, key: str, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until a running node other than ``old`` serves ``key`` and every running
        node says the cluster is ok; that node."""
        end = time.monotonic() + timeout
        while True:
            try:
                node = self.primary_of(key)
                if node is not old and all(self._state_ok(n) for n in self._running()):
                    return node
            except RuntimeError:
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"no failover of {key!r}'s slot within {timeout} s")
            time.sleep(0.1)

    # ---- helpers ----------------------------------------------------------------------
    def _running(self) -> Iterator[RedisServer]:
        return (node for node in self.nodes if node.running and not node.paused)

    @staticmethod
    def _reply(node: RedisServer, command: str, *, whole: bool = False) -> str:
        reply = node.command_reply(command.encode(), whole=whole)
        if reply is None or reply.startswith("-"):
            raise RuntimeError(f"{node.label}: {command}: {reply}")
        if reply.startswith("$"):  # a bulk reply: its text after the length line
            return reply.partition("\r\n")[2]
        return reply.lstrip("+")

    def _retry(self, end: float, node: RedisServer, command: str) -> None:
        while True:
            try:
                self._reply(node, command)
                return
            except RuntimeError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)

    def _knows(self, node: RedisServer, count: int) -> bool:
        lines = (self._reply(node, "CLUSTER NODES", whole=True) or "").splitlines()
        return len(lines) == count and all("handshake" not in line for line in lines)

    def _state_ok(self, node: RedisServer) -> bool:
        return "cluster_state:ok" in self._reply(node, "CLUSTER INFO", whole=True)

    def _serving(self, node: RedisServer) -> bool:
        if not self._state_ok(node):
            return False
        if node in self.nodes[self.primaries :]:
            info = self._reply(node, "INFO replication", whole=True)
            return "master_link_status:up" in info
        return True

    def _wait(self, end: float, ready: Callable[[RedisServer], bool]) -> None:
        while not all(ready(node) for node in self.nodes):
            if time.monotonic() > end:
                raise TimeoutError("the Redis Cluster did not come up in time")
            time.sleep(0.1)


def _covers(part: str, slot: int) -> bool:
    """Does a ``CLUSTER NODES`` slot field (``5``, ``0-5460``, ``[...]``) hold ``slot``?"""
    if part.startswith("["):
        return False
    low, _, high = part.partition("-")
    return int(low) <= slot <= int(high or low)
