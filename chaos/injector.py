"""How each fault is done and healed, and the fault log: shared by the serial nemesis
(`chaos/nemesis.py`) and the storm (`chaos/storm.py`).

Client faults act on one client slot: kill -9 (a new incarnation starts at once),
SIGSTOP past the session then SIGCONT, or its proxies cut / black-holed / dropping
replies / holding bytes (a delay) for a while; on PostgreSQL and MariaDB, also its session expired
by an operator (its permits are lost, it enters the queue again). Server faults: kill -9
of the leader or of a member (restarted a little later), or of every member at once (a
restart of the whole cluster). Every fault is logged with its start and the moment it was healed.
Safe to call from several threads as long as each slot has one caller at a time and
server faults have one caller.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from semaphore_recipes.testing.proxy import FaultProxy

from .cluster import MySQLTestCluster, PostgreSQLTestCluster, TestCluster
from .cluster_redis_sentinel import RedisSentinelTestCluster
from .fleet import ClientSlot
from .model import Fault, FaultKind

# how each network fault starts on a proxy (restore() ends it)
NETWORK_FAULTS: dict[FaultKind, Callable[[FaultProxy], None]] = {
    FaultKind.CUT: FaultProxy.cut,
    FaultKind.BLACKHOLE: FaultProxy.blackhole,
    FaultKind.DROP_REPLIES: FaultProxy.drop_replies,
    FaultKind.DELAY: FaultProxy.hold,
}
CLIENT_WEIGHTS = {
    FaultKind.KILL_CLIENT: 3,
    FaultKind.PAUSE_CLIENT: 2,
    FaultKind.CUT: 1.5,
    FaultKind.BLACKHOLE: 1.5,
    FaultKind.DROP_REPLIES: 1.5,
    FaultKind.DELAY: 1.5,
}
# client faults only some stores have (``cluster.client_faults``)
STORE_CLIENT_WEIGHTS = {
    FaultKind.EXPIRE_SESSION: 1.5,
}
SERVER_WEIGHTS = {
    FaultKind.KILL_LEADER: 1,
    FaultKind.KILL_MEMBER: 1,
    FaultKind.RESTART_CLUSTER: 0.5,
}


def client_weights(cluster: TestCluster) -> dict[FaultKind, float]:
    """The client faults of every store, then those of ``cluster`` alone (in that order:
    a seed's schedule on the other stores is kept)."""
    extra = {k: w for k, w in STORE_CLIENT_WEIGHTS.items() if k in cluster.client_faults}
    return {**CLIENT_WEIGHTS, **extra}


def server_weights(cluster: TestCluster) -> dict[FaultKind, float]:
    """The server faults ``cluster`` can suffer (one Redis primary has no leader to
    kill), weighted as in SERVER_WEIGHTS."""
    return {k: w for k, w in SERVER_WEIGHTS.items() if k in cluster.server_faults}


def pick(rng: random.Random, weights: dict[FaultKind, float]) -> FaultKind:
    kinds = list(weights)
    return rng.choices(kinds, [weights[k] for k in kinds])[0]


class Injector:
    def __init__(
        self,
        cluster: TestCluster,
        respawn: Callable[[ClientSlot], None],
        *,
        session_timeout: float,
        log_path: Path,
        stopping: threading.Event,
    ) -> None:
        self.cluster = cluster
        self.respawn = respawn
        self.session = session_timeout
        self.log_path = log_path
        self.stopping = stopping  # a stop request shortens a fault, never skips healing
        self.faults: list[Fault] = []
        self._lock = threading.Lock()

    def _record(self, kind: FaultKind, target: str, start: float) -> None:
        fault = Fault(kind, target, start, time.time())
        with self._lock:
            self.faults.append(fault)
            with self.log_path.open("a") as log:
                log.write(json.dumps({"kind": kind.value, "target": target,
                                      "start": fault.start, "end": fault.end}) + "\n")  # fmt: skip

    def client_fault(self, kind: FaultKind, slot: ClientSlot, rng: random.Random) -> None:
        start = time.time()
        if kind is FaultKind.KILL_CLIENT:
            target = slot.owner
            slot.kill9()
            self._record(kind, target, start)
            self.respawn(slot)
        elif kind is FaultKind.PAUSE_CLIENT:
            slot.signal(signal.SIGSTOP)
            time.sleep(self.session + rng.uniform(0.5, 1.5))  # past the session, always
            slot.signal(signal.SIGCONT)
            self._record(kind, slot.owner, start)
        elif kind in NETWORK_FAULTS:
            for proxy in slot.proxies:
                NETWORK_FAULTS[kind](proxy)
            self.stopping.wait(rng.uniform(0.3, 2.5 * self.session))
            if kind in (FaultKind.BLACKHOLE, FaultKind.DROP_REPLIES):
                # Bytes were thrown away mid-stream: TCP never does that to a live
                # connection, so the connections die (reset) before traffic resumes.
                for proxy in slot.proxies:
                    proxy.cut()
            slot.restore_network()
            self._record(kind, slot.owner, start)
        elif kind is FaultKind.EXPIRE_SESSION:
            if not isinstance(self.cluster, PostgreSQLTestCluster | MySQLTestCluster):
                raise ValueError(f"{self.cluster.backend} has no session expiry by an operator")
            target = slot.owner
            if self.cluster.expire_session(target):  # (not while the server restarts)
                self._record(kind, target, start)
        else:
            raise ValueError(f"{kind} is not a client fault")

    def server_fault(self, kind: FaultKind, rng: random.Random) -> None:
        start = time.time()
        if kind in (FaultKind.KILL_LEADER, FaultKind.KILL_MEMBER):
            # (under Sentinel a member kill is the replica's: the primary's is a leader kill)
            members = (
                self.cluster.replicas() if isinstance(self.cluster, RedisSentinelTestCluster)
                else self.cluster.members
            )  # fmt: skip
            member = self.cluster.leader() if kind is FaultKind.KILL_LEADER else rng.choice(members)
            start = time.time()
            self.cluster.kill(member)
            self.stopping.wait(rng.uniform(0.5, 3.0))
            self.cluster.revive(member)
            self.cluster.wait_healthy()
            self._record(kind, member, start)
        elif kind is FaultKind.RESTART_CLUSTER:
            self.cluster.kill_all()
            self.stopping.wait(rng.uniform(0.2, 1.0))
            self.cluster.start_all()
            self.cluster.wait_healthy()
            self._record(kind, "all", start)
        else:
            raise ValueError(f"{kind} is not a server fault")
