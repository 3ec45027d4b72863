"""The cluster under test for ``--backend redis-sentinel``: two persistent Redis data
nodes (a primary and its replica, ``appendfsync always``) and three sentinels
(semaphore_recipes/devtools/redis_sentinel.py).

Members are the two data nodes; the leader is the primary the sentinels name. Server
faults: a leader kill is a kill -9 of the primary, then the sentinels' failover to the
replica, then the killed node started again as a replica of the new primary; a member
kill is a kill -9 of the replica, started again as a replica; a cluster restart kills
both and starts them from their AOFs, the primary first.

The history is stitched from the primaries' AOFs, epoch by epoch
(chaos/history_sentinel.py). A node that rejoins does a full resync, which rewrites its
AOF: the nodes run with no automatic rewrite and ``aof-disable-auto-gc yes``, so a
rewrite keeps the files it replaced (as history files of the manifest) and each node's
``appendonlydir`` holds everything it ever wrote, one segment per (re)sync. An epoch
is its primary and the segment it was in when promoted (a primary does not resync).
Nothing has to be copied before a node starts again, nor in a race with a failover the
campaign did not cause.

The leader watch (chaos/leaders.py) asks each sentinel for its configuration epoch and
the primary it names: a failover raises the epoch. A failover the campaign did not cause
(a primary, or a just promoted one, that answered the sentinels too late on a loaded
machine) is followed as a new epoch all the same.

Clients reach the sentinels directly; their data connections go through their slot's
fault proxies, one per data node: the sentinels name real node addresses, so the
client process (chaos/client.py, test code) maps each to its proxy (``--address-map``,
:meth:`RedisSentinelTestCluster.address_map`). The runner's own writes (markers, clock
ticks, the data key) and the leak check go to the primary the sentinels name, sent
again across a failover.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.sentinel

from semaphore_recipes.devtools.redis_sentinel import SERVICE, RedisSentinelSet
from semaphore_recipes.devtools.redis_server import RedisServer

from . import history_redis, history_sentinel
from .layout import CLOCK_KEY, DATA_NODE, MARKER_NODE, REDIS_PREFIX, SEMAPHORE
from .leaders import MemberView
from .model import FaultKind, HistoryEvent
from .timeouts import PROBE_TIMEOUT, REQUEST_TIMEOUT

log = logging.getLogger(__name__)

ADMIN_TIMEOUT = 5.0
# an admin write is sent again within this across a failover
ADMIN_WITHIN = 60.0
# a failover and a rejoin (a full resync of a node's data) on a loaded machine
FAILOVER_WITHIN = 60.0
# the sentinels count a restarted primary up again (a few of their pings)
SEEN_UP_WITHIN = 15.0
_NODE_ARGS = ("--auto-aof-rewrite-percentage", "0", "--aof-disable-auto-gc", "yes")


@dataclass(frozen=True)
class _Epoch:
    primary: str
    segment: int  # its AOF's base file number when it was promoted


@dataclass(frozen=True)
class FailoverReport:
    """What the failovers of a run cost: how many, the commands each new primary lacked
    (by kind), and the grants (entry id, token) among them."""

    failovers: int
    lost: Counter[str]
    lost_grants: frozenset[tuple[str, int]]


class RedisSentinelTestCluster:
    backend = "redis-sentinel"
    server_faults = (FaultKind.KILL_LEADER, FaultKind.KILL_MEMBER, FaultKind.RESTART_CLUSTER)
    client_faults: tuple[FaultKind, ...] = ()

    def __init__(self, workdir: Path, session_timeout: float, wait_replicas: int = 1) -> None:
        if wait_replicas < 0:
            raise ValueError(f"wait_replicas={wait_replicas} must be 0 or more")
        self.session_timeout = session_timeout
        self.wait_replicas = wait_replicas
        self.set = RedisSentinelSet(
            workdir=workdir / "sentinel-set", persistent=True, node_args=_NODE_ARGS
        )
        self.epochs: list[_Epoch] = []
        self.admin: Any = None
        self.failover_report = FailoverReport(0, Counter(), frozenset())
        self._killed_primary: RedisServer | None = None  # a leader kill in progress
        self._lock = threading.Lock()  # the epochs: the injector's and the watch's threads

    # --- members ---------------------------------------------------------------------

    @property
    def members(self) -> list[str]:
        return [self._name(node) for node in self.set.nodes]

    def _name(self, node: RedisServer) -> str:
        return f"node{self.set.nodes.index(node)}"

    def _node(self, member: str) -> RedisServer:
        return self.set.nodes[int(member.removeprefix("node"))]

    def endpoint(self, member: str) -> str:
        return self._node(member).host_port

    def url(self, hosts: list[str]) -> str:
        """The sentinels' URL (``hosts``, the data nodes' or their proxies' addresses,
        are not in it: a client maps them with :meth:`address_map`)."""
        del hosts
        return self.set.url(
            f"prefix={REDIS_PREFIX}&session_timeout={self.session_timeout:g}"
            f"&request_timeout={REQUEST_TIMEOUT:g}&wait_replicas={self.wait_replicas}"
        )

    def address_map(self, proxies: list[str]) -> str:
        """``real=proxy,...``: each data node's address and the proxy (in the order of
        :attr:`members`) a client reaches it through."""
        return ",".join(
            f"{node.host_port}={proxy}" for node, proxy in zip(self.set.nodes, proxies, strict=True)
        )

    # --- the runner's writes ---------------------------------------------------------

    def _on_primary(self, write: Any, within: float = ADMIN_WITHIN) -> Any:
        deadline = time.monotonic() + within
        while True:
            try:
                return write(self.admin)
            except redis.RedisError as exc:  # a failover: the old primary gone or demoted
                if time.monotonic() > deadline:
                    raise
                log.info("admin write failed, again: %r", exc)
                time.sleep(0.1)

    def _epoch(self, node: RedisServer) -> _Epoch:
        found = history_sentinel.current_segment(self._aof_dir(node))
        if found is None:
            raise RuntimeError(f"no AOF manifest in {self._aof_dir(node)}")
        return _Epoch(self._name(node), found)

    def _aof_dir(self, node: RedisServer) -> Path:
        return Path(node.workdir) / "appendonlydir"

    def start(self) -> None:
        self.set.start(timeout=60)
        self.epochs = [self._epoch(self.set.primary())]
        sentinels = [(s.host_port.rsplit(":", 1)[0], s.port) for s in self.set.sentinels]
        sentinel_type: Any = redis.sentinel.Sentinel  # (redis-py's Sentinel is untyped)
        self.admin = sentinel_type(sentinels, socket_timeout=PROBE_TIMEOUT).master_for(
            SERVICE, socket_timeout=ADMIN_TIMEOUT
        )
        self._on_primary(lambda admin: admin.set(DATA_NODE, b""))  # fenced writes set it
        self._on_primary(lambda admin: admin.wait(1, int(ADMIN_TIMEOUT * 1000)))

    def mark(self, name: str) -> None:
        self._on_primary(lambda admin: admin.set(MARKER_NODE, name.encode()))

    def tick(self) -> None:
        """One attempt (the next tick comes a fraction of a second later)."""
        self.admin.set(CLOCK_KEY, json.dumps(time.time()).encode())

    # --- faults ----------------------------------------------------------------------

    def leader(self) -> str:
        return self._name(self.set.primary())

    def replicas(self) -> list[str]:
        """The data nodes that are not the primary the sentinels name."""
        return [self._name(node) for node in self.set.replicas()]

    def kill(self, member: str) -> None:
        node = self._node(member)
        with self._lock:
            node.kill()
            if self.epochs[-1].primary == member:
                self._killed_primary = node

    def revive(self, member: str) -> None:
        """A killed primary: wait for the sentinels' new one (a new epoch), then rejoin
        as its replica; a killed replica: start it again as one."""
        node = self._node(member)
        if self._killed_primary is node:
            new = self.set.wait_for_new_primary(node, timeout=FAILOVER_WITHIN)
            with self._lock:
                if self.epochs[-1].primary != self._name(new):  # (not followed already)
                    self.epochs.append(self._epoch(new))
                self._killed_primary = None
        self.set.rejoin(node, timeout=FAILOVER_WITHIN)

    def kill_all(self) -> None:
        with self._lock:
            for node in self.set.nodes:
                node.kill()

    def start_all(self) -> None:
        """The epoch's primary from its AOF; once every sentinel counts it up again, the
        other as its replica (a replica up while the sentinels still hold the primary
        down, a second after its kill, would be promoted: a failover no kill asked for)."""
        primary = self._node(self.epochs[-1].primary)
        primary.replica_of = None
        primary.start(FAILOVER_WITHIN)
        deadline = time.monotonic() + SEEN_UP_WITHIN
        while not self._seen_up(primary):
            if time.monotonic() > deadline:  # (the replica's start then risks a failover)
                log.warning("the sentinels do not see %s up again", primary.host_port)
                break
            time.sleep(0.1)
        for node in self.set.nodes:
            if node is not primary:
                node.replica_of = primary.host_port
                node.start(FAILOVER_WITHIN)
        self.set.wait_settled(FAILOVER_WITHIN)

    def _seen_up(self, node: RedisServer) -> bool:
        """Whether every sentinel names ``node`` as the primary and holds it up."""
        for sentinel in self.set.sentinels:
            state = sentinel.master_state()
            named = f"{state.get('ip')}:{state.get('port')}"
            if state.get("flags") != "master" or named != node.host_port:
                return False
        return True

    def wait_healthy(self) -> None:
        for node in self.set.nodes:
            if not node.running:
                self.revive(self._name(node))
        self.set.wait_settled(FAILOVER_WITHIN)

    def member_views(self) -> list[MemberView]:
        """Each sentinel's configuration epoch (a failover raises it) and the data node
        it names as primary. A primary named that is not the epoch's, with no leader
        kill in progress, is a failover the campaign did not cause: a new epoch."""
        views = []
        for i, sentinel in enumerate(self.set.sentinels):
            with contextlib.suppress(redis.RedisError, KeyError, ValueError):
                probe = redis.Redis(port=sentinel.port, socket_timeout=PROBE_TIMEOUT)
                try:
                    state: Any = probe.sentinel_master(SERVICE)
                finally:
                    probe.close()
                node = self.set.node_at(f"{state['ip']}:{state['port']}")
                named = self._name(node) if node is not None else None
                views.append(MemberView(f"sentinel{i}", int(state["config-epoch"]), named))
        named_now = {v.leader for v in views}
        if len(views) >= 2 and len(named_now) == 1:
            self._follow(named_now.pop())
        return views

    def _follow(self, primary: str | None) -> None:
        """A new epoch if ``primary`` (the sentinels' answer) is another node than the
        epoch's and serves as a primary, outside a leader kill (revive() records its
        own) and a cluster restart."""
        with self._lock:
            current = self.epochs[-1].primary if self.epochs else None
            if primary is None or current is None or primary == current:
                return
            if self._killed_primary is not None or not self._node(current).running:
                return
            node = self._node(primary)
            info = node.command_reply(b"INFO replication", whole=True) or ""
            if "role:master" not in info:  # (a poll older than the last failover)
                return
            self.epochs.append(self._epoch(node))
            log.warning("a failover from %s to %s that no leader kill caused", current, primary)

    # --- the history -----------------------------------------------------------------

    def _epoch_log(self, epoch: _Epoch) -> tuple[history_sentinel.EpochLog, list[str]]:
        files, base_has_data, problems = history_sentinel.segment(
            self._aof_dir(self._node(epoch.primary)), epoch.segment
        )
        commands = list(history_redis.read_commands(files))
        return history_sentinel.EpochLog(epoch.primary, commands, base_has_data), problems

    def history(self) -> tuple[list[HistoryEvent], list[str], list[str]]:
        """(events, problems, leases alive): the epochs' AOFs stitched, once every node
        stopped."""
        lease_prefix = f"{REDIS_PREFIX}:lease:"
        alive = self._on_primary(lambda admin: admin.keys(lease_prefix + "*"))
        alive = [k.decode().removeprefix(lease_prefix) for k in alive]
        named = self.leader()
        with contextlib.suppress(Exception):
            self.admin.close()
        self.set.stop()
        problems: list[str] = []
        if named != self.epochs[-1].primary:
            problems.append(f"the sentinels name {named}, the last epoch's primary is "
                            f"{self.epochs[-1].primary}")  # fmt: skip
        logs = []
        for epoch in self.epochs:
            epoch_log, epoch_problems = self._epoch_log(epoch)
            problems += epoch_problems
            logs.append(epoch_log)
        stitched = history_sentinel.stitch(logs)
        problems += stitched.problems
        layout = history_redis.RedisLayout(
            REDIS_PREFIX, SEMAPHORE, DATA_NODE, MARKER_NODE, CLOCK_KEY
        )
        lost = stitched.lost_commands
        self.failover_report = FailoverReport(
            len(self.epochs) - 1,
            history_sentinel.lost_kinds(lost, layout),
            frozenset(history_sentinel.lost_grants(lost, layout)),
        )
        for number, commands in stitched.lost:
            log.warning(
                "epoch %d: %d commands lost with the old primary: %s", number, len(commands),
                dict(history_sentinel.lost_kinds(commands, layout)),
            )  # fmt: skip
        return history_redis.normalize(stitched.commands, layout), problems, alive

    def log_tail(self) -> str:
        return "\n".join(
            f"--- {process.label}\n{process.log_tail(15)}" for process in self.set.processes
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.admin is not None:
                self.admin.close()
        self.set.close()
