"""The cluster under test: a 3-node ZooKeeper ensemble, a 3-member etcd cluster, one
persistent Redis primary, a Redis primary and replica under Sentinel
(chaos/cluster_redis_sentinel.py), one PostgreSQL primary or one MariaDB server from the
project's harness, with
what the nemesis and the runner need (kill/restart a member, find the leader, ask each
member its term and leader, restart everything, write markers, read the history)."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import semaphore_recipes
from semaphore_recipes.devtools.etcd_server import EtcdCluster
from semaphore_recipes.devtools.mysql_server import MariaDBServer
from semaphore_recipes.devtools.postgresql_server import PostgreSQLServer
from semaphore_recipes.devtools.programs import find_program
from semaphore_recipes.devtools.redis_server import RedisServer
from semaphore_recipes.devtools.zookeeper_server import ZooKeeperEnsemble

from . import history_etcd, history_mysql, history_postgresql, history_redis, history_zk
from .cluster_redis_sentinel import RedisSentinelTestCluster
from .layout import (
    CLOCK_KEY,
    DATA_NODE,
    ETCD_PREFIX,
    MARKER_NODE,
    MYSQL_DATABASE,
    PG_SCHEMA,
    REDIS_PREFIX,
    SEMAPHORE,
    ZK_SEMAPHORE_PATH,
)
from .leaders import MemberView
from .model import FaultKind, HistoryEvent
from .timeouts import PROBE_TIMEOUT, REQUEST_TIMEOUT

log = logging.getLogger(__name__)

# the runner's own statements on PostgreSQL and MariaDB (markers, session expiry, history)
ADMIN_TIMEOUT = 5
_SRVR_ZXID = re.compile(r"^Zxid:\s*0x([0-9a-fA-F]+)", re.MULTILINE)
_SRVR_MODE = re.compile(r"^Mode:\s*(\w+)", re.MULTILINE)


#: what a cluster of several members can suffer (the nemesis picks among them)
MEMBER_FAULTS = (FaultKind.KILL_LEADER, FaultKind.KILL_MEMBER, FaultKind.RESTART_CLUSTER)


class ZkCluster:
    backend = "zookeeper"
    server_faults = MEMBER_FAULTS
    client_faults: tuple[FaultKind, ...] = ()

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

    def member_views(self) -> list[MemberView]:
        """Each serving member's epoch (the high 32 bits of its last zxid: a new leader
        starts a new epoch) from ``srvr``; the leader names itself, followers name none
        (``srvr`` does not say whom they follow)."""
        views = []
        for server in self.ensemble.servers:
            with contextlib.suppress(OSError):
                out = server.four_letter("srvr", timeout=PROBE_TIMEOUT)
                zxid, mode = _SRVR_ZXID.search(out), _SRVR_MODE.search(out)
                if zxid is not None and mode is not None:  # else: not serving
                    member = str(server.myid)
                    leader = member if mode.group(1) == "leader" else None
                    views.append(MemberView(member, int(zxid.group(1), 16) >> 32, leader))
        return views

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
    server_faults = MEMBER_FAULTS
    client_faults: tuple[FaultKind, ...] = ()

    def __init__(self, workdir: Path, session_timeout: float) -> None:
        del workdir  # the harness keeps its own temporary directory
        self.session_timeout = session_timeout
        self.cluster = EtcdCluster(3)
        self.admin: Any = None
        self.end_revision = 0
        self.probes: dict[str, Any] = {}  # member name -> a client of that member alone
        self.names: dict[int, str] = {}  # member id -> name, learnt from Status answers

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
        self.admin.put(DATA_NODE.encode(), b"", timeout=5.0)  # fenced writes set it
        self.probes = {m.name: StatusProbe(m.endpoint) for m in self.cluster.members}

    def kill(self, member: str) -> None:
        self._member(member).kill()

    def revive(self, member: str) -> None:
        m = self._member(member)
        m.spawn()
        m.wait_ready(30)

    def leader(self) -> str:
        return str(self.cluster.leader(timeout=10).name)

    def member_views(self) -> list[MemberView]:
        """Each reachable member's raft term and the leader it knows (``Status``, which
        a member answers by itself, without its leader: it answers while writes stall)."""
        import grpc

        answers = []
        for name, probe in self.probes.items():
            with contextlib.suppress(grpc.RpcError):
                status = probe.status()
                self.names[int(status.header.member_id)] = name
                answers.append((name, int(status.raftTerm), int(status.leader)))
        return [
            MemberView(name, term, self.names.get(lead, f"{lead:x}") if lead else None)
            for name, term, lead in answers
        ]

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
        for client in [self.admin, *self.probes.values()]:
            with contextlib.suppress(Exception):
                if client is not None:
                    client.close()
        self.cluster.close()


class StatusProbe:
    """etcd's Maintenance ``Status`` of one member, asked of that member alone and failing
    fast when it does not answer (the library's client waits for a member to be ready and
    makes no Status call)."""

    def __init__(self, endpoint: str) -> None:
        import grpc

        from semaphore_recipes.etcd._proto import etcd_api_pb2_grpc

        stubs: Any = etcd_api_pb2_grpc  # generated without type hints
        self.channel = grpc.insecure_channel(endpoint)
        self._stub: Any = stubs.MaintenanceStub(self.channel)

    def status(self) -> Any:
        from semaphore_recipes.etcd._proto import etcd_api_pb2 as pb

        return self._stub.Status(pb.StatusRequest(), timeout=PROBE_TIMEOUT)

    def close(self) -> None:
        self.channel.close()


class _HistoryKeepingRedis(RedisServer):
    """A persistent server whose AOF is never rewritten: it stays the whole history."""

    def command(self) -> list[str]:
        return [*super().command(), "--auto-aof-rewrite-percentage", "0"]


class RedisTestCluster:
    """One persistent Redis primary (``appendfsync always``): no leader to kill, no
    members to lose; its server fault is a crash (kill -9) and a restart from the AOF."""

    backend = "redis"
    server_faults = (FaultKind.RESTART_CLUSTER,)
    client_faults: tuple[FaultKind, ...] = ()

    def __init__(self, workdir: Path, session_timeout: float) -> None:
        self.session_timeout = session_timeout
        self.server = _HistoryKeepingRedis(workdir=workdir / "redis", persistent=True)
        self.admin: Any = None

    @property
    def members(self) -> list[str]:
        return ["redis"]

    def endpoint(self, member: str) -> str:
        return self.server.host_port

    def url(self, hosts: list[str]) -> str:
        return (
            f"redis://{hosts[0]}/0?prefix={REDIS_PREFIX}&session_timeout="
            f"{self.session_timeout:g}&request_timeout={REQUEST_TIMEOUT:g}"
        )

    def start(self) -> None:
        import redis

        self.server.start(timeout=30)
        host, port = self.server.host_port.rsplit(":", 1)
        self.admin = redis.Redis(host=host, port=int(port), socket_timeout=5.0)
        self.admin.set(DATA_NODE, b"")  # fenced writes set it (a set needs the key)

    def kill(self, member: str) -> None:
        self.server.kill()

    def revive(self, member: str) -> None:
        self.server.start(timeout=30)

    def leader(self) -> str:
        return "redis"

    def member_views(self) -> list[MemberView]:
        """No elections with one primary: nothing for the leader watch."""
        return []

    def kill_all(self) -> None:
        self.server.kill()

    def start_all(self) -> None:
        self.server.start(timeout=30)

    def wait_healthy(self) -> None:
        if not self.server.running:
            self.server.start(timeout=30)

    def mark(self, name: str) -> None:
        self.admin.set(MARKER_NODE, name.encode())

    def tick(self) -> None:
        self.admin.set(CLOCK_KEY, json.dumps(time.time()).encode())

    def history(self) -> tuple[list[HistoryEvent], list[str], list[str]]:
        """(events, problems, leases alive): read from the AOF once the server stopped."""
        lease_prefix = f"{REDIS_PREFIX}:lease:"
        alive = [k.decode().removeprefix(lease_prefix) for k in self.admin.keys(lease_prefix + "*")]
        with contextlib.suppress(Exception):
            self.admin.close()
        self.server.stop()
        files, problems = history_redis.aof_files(Path(self.server.workdir) / "appendonlydir")
        layout = history_redis.RedisLayout(
            REDIS_PREFIX, SEMAPHORE, DATA_NODE, MARKER_NODE, CLOCK_KEY
        )
        events = history_redis.normalize(history_redis.read_commands(files), layout)
        return events, problems, alive

    def log_tail(self) -> str:
        return self.server.log_tail(40)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.admin is not None:
                self.admin.close()
        self.server.close()


class PostgreSQLTestCluster:
    """One PostgreSQL primary with ``wal_level=logical``, its history read by logical
    decoding (chaos/history_postgresql.py). No leader to kill, no members to lose: its
    server fault is a restart, in turn a crash (kill -9), an immediate shutdown (SIGQUIT,
    no checkpoint) and a fast one (SIGINT). Its own client fault is an operator's expiry
    of a client's session (as ``PostgreSQLHarness.expire_session``). Commits are
    synchronous (the harness turns that off for speed): a crash loses no acknowledged
    commit, as the Redis primary's ``appendfsync always``."""

    backend = "postgresql"
    server_faults = (FaultKind.RESTART_CLUSTER,)
    client_faults = (FaultKind.EXPIRE_SESSION,)

    def __init__(self, workdir: Path, session_timeout: float) -> None:
        del workdir  # the server's user cannot enter the run directory: the harness's own
        self.session_timeout = session_timeout
        self.server = PostgreSQLServer(logical=True, settings={"synchronous_commit": "on"})
        # Run as root, the server dies with the *thread* that started it (the parent-death
        # signal is per thread): every start happens on this one thread, alive until close.
        self._parent = ThreadPoolExecutor(1, thread_name_prefix="postgres-parent")
        self._stops = itertools.cycle(("kill", "stop_immediate", "stop"))

    @property
    def members(self) -> list[str]:
        return ["postgresql"]

    def endpoint(self, member: str) -> str:
        return self.server.host_port

    def url(self, hosts: list[str]) -> str:
        return (
            f"postgresql://{hosts[0]}/postgres?user=postgres&schema={PG_SCHEMA}"
            f"&session_timeout={self.session_timeout:g}&request_timeout={REQUEST_TIMEOUT:g}"
        )

    def _start(self) -> None:
        self._parent.submit(self.server.start, timeout=60).result()

    def _admin(self) -> Any:
        import psycopg

        host, port = self.server.host_port.rsplit(":", 1)
        return psycopg.connect(
            host=host, port=int(port), user="postgres", dbname="postgres", autocommit=True,
            connect_timeout=ADMIN_TIMEOUT,
        )  # fmt: skip

    def start(self) -> None:
        """The server, the library's schema (a first backend makes it), whole rows in the
        history of entries, the row fenced writes set, then the slot: before any client."""
        self._start()
        semaphore_recipes.connect(self.url([self.server.host_port]), owner="setup").close()
        with self._admin() as admin:
            admin.execute(f"ALTER TABLE {PG_SCHEMA}.entries REPLICA IDENTITY FULL")
            admin.execute(
                f"INSERT INTO {PG_SCHEMA}.data VALUES (%s, '') ON CONFLICT DO NOTHING",
                (DATA_NODE,),
            )
            admin.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'test_decoding')",
                (history_postgresql.SLOT,),
            )

    def kill(self, member: str) -> None:
        self.kill_all()

    def revive(self, member: str) -> None:
        self.start_all()

    def leader(self) -> str:
        return "postgresql"

    def member_views(self) -> list[MemberView]:
        """No elections with one primary: nothing for the leader watch."""
        return []

    def kill_all(self) -> None:
        how = next(self._stops)
        log.info("postgresql restart: %s", how)  # (the run's runner.log)
        if how == "kill":
            self.server.kill()
        elif how == "stop_immediate":
            self.server.stop_immediate()
        else:
            self.server.stop()

    def start_all(self) -> None:
        self._start()

    def wait_healthy(self) -> None:
        if not self.server.running:
            self._start()

    def expire_session(self, owner: str) -> bool:
        """Expire the live sessions of client ``owner`` as an operator would; False when
        the server did not answer (it may be restarting)."""
        import psycopg

        try:
            with self._admin() as admin:
                admin.execute(
                    f"UPDATE {PG_SCHEMA}.sessions SET expires_at = '-infinity' "
                    "WHERE owner = %s AND expires_at > clock_timestamp()",
                    (owner,),
                )
        except psycopg.OperationalError as exc:
            log.info("expiring the session of %s failed: %r", owner, exc)
            return False
        return True

    def mark(self, name: str) -> None:
        with self._admin() as admin:
            admin.execute(
                f"INSERT INTO {PG_SCHEMA}.data VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (MARKER_NODE, name.encode()),
            )

    def tick(self) -> None:
        """Every transaction of the history carries its commit time: no clock key."""

    def history(self) -> tuple[list[HistoryEvent], list[str], list[str]]:
        """(events, problems, sessions alive): the slot's changes since the start."""
        with self._admin() as admin:
            alive = [
                str(row[0])
                for row in admin.execute(
                    f"SELECT id FROM {PG_SCHEMA}.sessions WHERE expires_at > clock_timestamp()"
                )
            ]
            for setting in history_postgresql.READER_SETTINGS:
                admin.execute(setting)
            lines = [str(row[0]) for row in admin.execute(history_postgresql.CHANGES_SQL)]
        layout = history_postgresql.PostgreSQLLayout(PG_SCHEMA, SEMAPHORE, DATA_NODE, MARKER_NODE)
        return history_postgresql.normalize(history_postgresql.parse(lines), layout), [], alive

    def log_tail(self) -> str:
        return self.server.log_tail(40)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.server.close()
        self._parent.shutdown()


class MySQLTestCluster:
    """One MariaDB server with its row-based binary log on, the history read from that
    log (chaos/history_mysql.py). No leader to kill, no members to lose: its server
    fault is a restart, in turn a crash (kill -9) and a clean shutdown (SIGTERM). Its
    own client fault is an operator's expiry of a client's session. A crash loses no
    acknowledged commit: the binary log and the redo log are written at each commit (the
    kernel has them; only a machine crash could lose them)."""

    backend = "mysql"
    server_faults = (FaultKind.RESTART_CLUSTER,)
    client_faults = (FaultKind.EXPIRE_SESSION,)

    def __init__(self, workdir: Path, session_timeout: float) -> None:
        self.session_timeout = session_timeout
        # DATETIME values in UTC whatever the machine's zone: the history reads them so
        self.server = MariaDBServer(
            workdir=workdir / "mariadb", settings={"default_time_zone": "+00:00"}
        )
        self._stops = itertools.cycle(("kill", "stop"))

    @property
    def members(self) -> list[str]:
        return ["mysql"]

    def endpoint(self, member: str) -> str:
        return self.server.host_port

    def url(self, hosts: list[str]) -> str:
        return (
            f"mysql://root@{hosts[0]}/{MYSQL_DATABASE}?session_timeout="
            f"{self.session_timeout:g}&request_timeout={REQUEST_TIMEOUT:g}"
        )

    def _admin(self) -> Any:
        import pymysql

        host, port = self.server.host_port.rsplit(":", 1)
        return pymysql.connect(
            host=host, port=int(port), user="root", autocommit=True,
            connect_timeout=ADMIN_TIMEOUT, read_timeout=ADMIN_TIMEOUT,
            write_timeout=ADMIN_TIMEOUT,
        )  # fmt: skip

    def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        admin = self._admin()
        try:
            with admin.cursor() as cursor:
                cursor.execute(sql, args)
                return list(cursor.fetchall())
        finally:
            admin.close()

    def start(self) -> None:
        """The server, the database, the library's tables (a first backend makes them)
        and the row fenced writes set: before any client."""
        self.server.start(timeout=60)
        self._execute(f"CREATE DATABASE IF NOT EXISTS {MYSQL_DATABASE}")
        semaphore_recipes.connect(self.url([self.server.host_port]), owner="setup").close()
        self._execute(f"INSERT IGNORE INTO {MYSQL_DATABASE}.sr_data VALUES (%s, '')", (DATA_NODE,))

    def kill(self, member: str) -> None:
        self.kill_all()

    def revive(self, member: str) -> None:
        self.start_all()

    def leader(self) -> str:
        return "mysql"

    def member_views(self) -> list[MemberView]:
        """No elections with one server: nothing for the leader watch."""
        return []

    def kill_all(self) -> None:
        how = next(self._stops)
        log.info("mysql restart: %s", how)  # (the run's runner.log)
        if how == "kill":
            self.server.kill()
        else:
            self.server.stop()

    def start_all(self) -> None:
        self.server.start(timeout=60)

    def wait_healthy(self) -> None:
        if not self.server.running:
            self.server.start(timeout=60)

    def expire_session(self, owner: str) -> bool:
        """Expire the live sessions of client ``owner`` as an operator would; False when
        the server did not answer (it may be restarting)."""
        import pymysql

        try:
            self._execute(
                f"UPDATE {MYSQL_DATABASE}.sr_sessions SET expires_at = '1970-01-02' "
                "WHERE owner = %s AND expires_at > SYSDATE(6)",
                (owner,),
            )
        except pymysql.Error as exc:
            log.info("expiring the session of %s failed: %r", owner, exc)
            return False
        return True

    def mark(self, name: str) -> None:
        self._execute(
            f"INSERT INTO {MYSQL_DATABASE}.sr_data VALUES (%s, %s) "
            "ON DUPLICATE KEY UPDATE value = VALUES(value)",
            (MARKER_NODE, name.encode()),
        )

    def tick(self) -> None:
        """Every transaction of the binary log carries its time: no clock key."""

    def history(self) -> tuple[list[HistoryEvent], list[str], list[str]]:
        """(events, problems, sessions alive): the binary log since the start, decoded
        by ``mariadb-binlog`` (the server keeps running; its logs are flushed first)."""
        alive = [
            str(row[0])
            for row in self._execute(
                f"SELECT id FROM {MYSQL_DATABASE}.sr_sessions WHERE expires_at > SYSDATE(6)"
            )
        ]
        self._execute("FLUSH BINARY LOGS")
        files = sorted(str(p) for p in Path(self.server.workdir).glob("binlog.0*"))
        decoded = subprocess.run(
            [
                find_program("mariadb-binlog"), "--base64-output=DECODE-ROWS", "--verbose",
                f"--database={MYSQL_DATABASE}", *files,
            ],
            capture_output=True, check=False, timeout=300,
        )  # fmt: skip
        problems = []
        if decoded.returncode != 0:
            problems.append(f"mariadb-binlog failed: {decoded.stderr.decode(errors='replace')}")
        lines = decoded.stdout.decode("utf-8", errors="surrogateescape").splitlines()
        layout = history_mysql.MySQLLayout(MYSQL_DATABASE, SEMAPHORE, DATA_NODE, MARKER_NODE)
        return history_mysql.normalize(history_mysql.parse(lines), layout), problems, alive

    def log_tail(self) -> str:
        return self.server.log_tail(40)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.server.close()


TestCluster = (
    ZkCluster
    | EtcdTestCluster
    | RedisTestCluster
    | RedisSentinelTestCluster
    | PostgreSQLTestCluster
    | MySQLTestCluster
)


def make_cluster(
    backend: str, workdir: Path, session_timeout: float, *, wait_replicas: int = 1
) -> TestCluster:
    """``wait_replicas``: the URL parameter of ``redis-sentinel``'s clients."""
    if backend == "redis-sentinel":
        return RedisSentinelTestCluster(workdir, session_timeout, wait_replicas)
    if backend == "zookeeper":
        return ZkCluster(workdir, session_timeout)
    if backend == "redis":
        return RedisTestCluster(workdir, session_timeout)
    if backend == "postgresql":
        return PostgreSQLTestCluster(workdir, session_timeout)
    if backend == "mysql":
        return MySQLTestCluster(workdir, session_timeout)
    return EtcdTestCluster(workdir, session_timeout)
