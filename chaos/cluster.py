"""The cluster under test: a 3-node ZooKeeper ensemble or a 3-member etcd cluster from
the project's harness, with what the nemesis and the runner need (kill/restart a
member, find the leader, restart everything, write markers, read the history)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from semaphore_recipes.etcd.server import EtcdCluster
from semaphore_recipes.zookeeper.server import ZooKeeperEnsemble

from . import history_etcd, history_zk
from .layout import CLOCK_KEY, DATA_NODE, ETCD_PREFIX, MARKER_NODE, ZK_SEMAPHORE_PATH
from .model import HistoryEvent

# what clients ask of each request (URL parameter); their op logs' bounds build on it
REQUEST_TIMEOUT = 2.0


class ZkCluster:
    backend = "zookeeper"

    def __init__(self, workdir: Path, session_timeout: float) -> None:
        self.session_timeout = session_timeout
        self.ensemble = ZooKeeperEnsemble(3, workdir=workdir / "zk", min_session_timeout_ms=1000)
        self.admin: Any = None

    @property
    def members(self) -> list[str]:
        return [str(s.myid) for s in self.ensemble.servers]

    def endpoint(self, member: str) -> str:
        return str(self._server(member).host_port)

    def _server(self, member: str) -> Any:
        return next(s for s in self.ensemble.servers if str(s.myid) == member)

    def url(self, hosts: list[str]) -> str:
        return (
            f"zookeeper://{','.join(hosts)}?session_timeout={self.session_timeout:g}"
            f"&request_timeout={REQUEST_TIMEOUT:g}"
        )

    def start(self) -> None:
        from kazoo.client import KazooClient

        self.ensemble.start(timeout=60)
        self.admin = KazooClient(hosts=self.ensemble.connect_string, timeout=10.0)
        self.admin.start(timeout=30)
        for path in (DATA_NODE, MARKER_NODE):
            self.admin.ensure_path(path)

    def kill(self, member: str) -> None:
        self._server(member).kill()

    def revive(self, member: str) -> None:
        self._server(member).start(timeout=60)

    def leader(self) -> str:
        return str(self.ensemble.leader().myid)

    def kill_all(self) -> None:
        for server in self.ensemble.servers:
            server.kill()

    def start_all(self) -> None:
        self.ensemble.start(timeout=60)

    def wait_healthy(self) -> None:
        for member in self.members:
            if not self._server(member).running:
                self.revive(member)
        self.ensemble.wait_for_quorum(timeout=60)

    def mark(self, name: str) -> None:
        self.admin.set(MARKER_NODE, name.encode())

    def tick(self) -> None:
        """ZooKeeper txns carry the leader's time: no clock key needed."""

    def history(self) -> tuple[list[HistoryEvent], list[str], list[str]]:
        """(events, problems with the history, leases alive): stops the ensemble first
        so that every member's log is complete on disk."""
        with contextlib.suppress(Exception):
            self.admin.stop()
            self.admin.close()
        self.ensemble.stop()
        txns, conflicts = history_zk.read_logs(s.data_dir for s in self.ensemble.servers)
        layout = history_zk.ZkLayout(ZK_SEMAPHORE_PATH, DATA_NODE, MARKER_NODE)
        return history_zk.normalize(txns, layout), conflicts, []

    def log_tail(self) -> str:
        return self.ensemble.log_tail(60)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.admin is not None:
                self.admin.stop()
                self.admin.close()
        self.ensemble.close()


class EtcdTestCluster:
    backend = "etcd"

    def __init__(self, workdir: Path, session_timeout: float) -> None:
        del workdir  # the harness keeps its own temporary directory
        self.session_timeout = session_timeout
        self.cluster = EtcdCluster(3)
        self.admin: Any = None
        self.end_revision = 0

    @property
    def members(self) -> list[str]:
        return [m.name for m in self.cluster.members]

    def _member(self, name: str) -> Any:
        return next(m for m in self.cluster.members if m.name == name)

    def endpoint(self, member: str) -> str:
        return str(self._member(member).endpoint)

    def url(self, hosts: list[str]) -> str:
        return (
            f"etcd://{','.join(hosts)}?session_timeout={self.session_timeout:g}"
            f"&request_timeout={REQUEST_TIMEOUT:g}"
        )

    def start(self) -> None:
        from semaphore_recipes.etcd.client import EtcdClient

        self.cluster.start(timeout=30)
        self.admin = EtcdClient(self.cluster.endpoints, timeout=5.0)

    def kill(self, member: str) -> None:
        self._member(member).kill()

    def revive(self, member: str) -> None:
        m = self._member(member)
        m.spawn()
        m.wait_ready(30)

    def leader(self) -> str:
        return str(self.cluster.leader(timeout=10).name)

    def kill_all(self) -> None:
        for m in self.cluster.members:
            m.kill()

    def start_all(self) -> None:
        for m in self.cluster.members:
            m.spawn()
        for m in self.cluster.members:
            m.wait_ready(30)

    def wait_healthy(self) -> None:
        for m in self.cluster.members:
            if not m.running:
                self.revive(m.name)
        self.cluster.leader(timeout=30)

    def mark(self, name: str) -> None:
        reply = self.admin.put(MARKER_NODE.encode(), name.encode(), timeout=5.0)
        self.end_revision = int(reply.header.revision)

    def tick(self) -> None:
        self.admin.put(CLOCK_KEY.encode(), json.dumps(time.time()).encode(), timeout=1.0)

    def history(self) -> tuple[list[HistoryEvent], list[str], list[str]]:
        raw = history_etcd.read_history(self.admin, self.end_revision)
        layout = history_etcd.EtcdLayout(
            entries_prefix=(ETCD_PREFIX + "entries/").encode(),
            config_key=(ETCD_PREFIX + "config").encode(),
            data_key=DATA_NODE.encode(),
            marker_key=MARKER_NODE.encode(),
            clock_key=CLOCK_KEY.encode(),
        )
        events = history_etcd.normalize(raw, layout)
        leases = {e.lease for e in raw if e.key.startswith(layout.entries_prefix)}
        return events, [], history_etcd.live_leases(self.admin, leases)

    def log_tail(self) -> str:
        return self.cluster.log_tail(40)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.admin is not None:
                self.admin.close()
        self.cluster.close()


TestCluster = ZkCluster | EtcdTestCluster


def make_cluster(backend: str, workdir: Path, session_timeout: float) -> TestCluster:
    if backend == "zookeeper":
        return ZkCluster(workdir, session_timeout)
    return EtcdTestCluster(workdir, session_timeout)
