"""Real ZooKeeper server processes, for development and tests.

Starts Apache ZooKeeper (the Debian ``zookeeper`` package, 3.8) as a child JVM on
loopback, either standalone (:class:`ZooKeeperServer`) or as a small quorum
(:class:`ZooKeeperEnsemble`); :func:`start_dev_server` is what ``semaphore-recipes
dev-server --backend zookeeper`` runs. The settings suit development and tests only
(no fsync, short ticks, every four-letter word allowed), never production data. A
standalone server started with ``tls`` also serves a TLS client port that requires a
client certificate (the zoo.cfg lines docs/operations.md shows).

The module imports without kazoo and without Java; errors only happen on use. Process
handling (work directory, log, start and stop, cleanup at exit, dying with this
process) is :class:`~semaphore_recipes.devtools.processes.ManagedProcess`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .dev_server import DevServer
from .processes import (
    ManagedProcess,
    ProcessGroup,
    ServerNotFound,
    ServerStartError,
    free_port,
)
from .programs import ProgramNotFound, find_program

__all__ = [
    "ZooKeeperEnsemble",
    "ZooKeeperNotFound",
    "ZooKeeperServer",
    "find_zookeeper_classpath",
    "start_dev_server",
]

logger = logging.getLogger("semaphore_recipes.servers")

INSTALL_HINT = (
    "install it with `apt-get install -y zookeeper` (as root; the server needs Java 17, "
    "e.g. `apt-get install -y openjdk-17-jre-headless`), or point the ZOOKEEPER_CLASSPATH "
    "environment variable at the ZooKeeper jars"
)
SLF4J_SIMPLE_JAR = "/usr/share/java/slf4j-simple.jar"
#: Netty's TLS handler needs these two, which the Class-Path of Debian's zookeeper.jar
#: manifest leaves out (its server then closes every TLS connection, logging
#: NoClassDefFoundError io/netty/handler/codec/ByteToMessageDecoder). Debian's zookeeper
#: depends on libnetty-java, which installs them.
NETTY_TLS_JARS = ("/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar")
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: How long ``dev-server`` waits for the JVM to serve.
DEV_START_TIMEOUT = 60.0

#: Small-footprint JVM flags, so that a 3-node ensemble fits beside the tests
#: (memory and start-up times: CONTRIBUTING.md).
JVM_FLAGS: tuple[str, ...] = (
    "-Xmx256m",
    "-Xms32m",
    "-XX:+UseSerialGC",
    "-XX:CICompilerCount=2",
    "-XX:MaxMetaspaceSize=64m",
    "-XX:ReservedCodeCacheSize=48m",
    "-Xss512k",
    "-Djava.net.preferIPv4Stack=true",
    # slf4j-simple formatting (ignored when slf4j-simple is not on the classpath).
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
)

_SERVING_MODES = ("standalone", "leader", "follower", "observer")


class ZooKeeperNotFound(ServerNotFound):
    """No local ZooKeeper installation (or no Java) was found."""


# --------------------------------------------------------------------------- helpers


def _find_java() -> str:
    try:
        return find_program("java")
    except ProgramNotFound as exc:
        raise ZooKeeperNotFound(
            f"no `java` executable found (JAVA_HOME or PATH); {INSTALL_HINT}"
        ) from exc


def find_zookeeper_classpath(*, tls: bool = False) -> str:
    """Return the Java classpath for the ZooKeeper server.

    ``$ZOOKEEPER_CLASSPATH`` wins when set; otherwise the Debian jar
    ``/usr/share/java/zookeeper.jar`` (``zookeeper.jar`` in :mod:`.programs`;
    its manifest pulls in the dependencies), plus ``/usr/share/java/slf4j-simple.jar`` when
    present so that server logs appear, and with ``tls`` the :data:`NETTY_TLS_JARS` the
    manifest misses. Raises :class:`ZooKeeperNotFound` when the jar or ``java`` is missing.
    """
    env = os.environ.get("ZOOKEEPER_CLASSPATH")
    if env:
        classpath = env
    else:
        try:
            parts = [find_program("zookeeper.jar")]
        except ProgramNotFound as exc:
            raise ZooKeeperNotFound(f"ZooKeeper not found ({exc}); {INSTALL_HINT}") from exc
        if Path(SLF4J_SIMPLE_JAR).is_file():
            parts.append(SLF4J_SIMPLE_JAR)
        if tls:
            parts += [jar for jar in NETTY_TLS_JARS if Path(jar).is_file()]
        classpath = os.pathsep.join(parts)
    _find_java()
    return classpath


def _parse_number(value: str) -> int | float | str:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def _parse_mode(srvr_output: str) -> str | None:
    for line in srvr_output.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return None


# --------------------------------------------------------------------------- server


class ZooKeeperServer(ManagedProcess):
    """One ZooKeeper server JVM on 127.0.0.1.

    Standalone by default. :class:`ZooKeeperEnsemble` creates members with ``myid``
    and ``quorum`` (``{myid: (peer_port, election_port)}`` for every member).

    ``tls`` (certificate, key, CA: PEM files) adds a TLS client port,
    :attr:`tls_port`, beside the plain one (which the readiness check and the
    four-letter words use): Netty serves both; a client must present a certificate the
    CA signed (``ssl.clientAuth=need``). Standalone servers only.

    Files live in ``workdir`` (a temporary directory removed by :meth:`close` when
    none is given): ``zoo.cfg``, ``data/``, ``zookeeper.log`` (JVM stdout+stderr,
    appended across restarts) and, with ``tls``, ``tls-keystore.pem`` (the key and the
    certificate in one file, as ZooKeeper's PEM key store wants them).
    """

    def __init__(
        self,
        *,
        tick_time_ms: int = 200,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60000,
        workdir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        myid: int | None = None,
        quorum: Mapping[int, tuple[int, int]] | None = None,
        init_limit: int = 20,
        sync_limit: int = 10,
        classpath: str | None = None,
        extra_config: Mapping[str, str] | None = None,
        tls: tuple[str, str, str] | None = None,
    ) -> None:
        if tls is not None and quorum is not None:
            raise ValueError("tls is for a standalone server (not an ensemble member)")
        if min_session_timeout_ms > max_session_timeout_ms:
            raise ValueError("min_session_timeout_ms must not exceed max_session_timeout_ms")
        if quorum is not None and (myid is None or myid not in quorum):
            raise ValueError("an ensemble member needs a myid that is a key of quorum")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port {port} is out of range")
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.myid = myid
        self.quorum: dict[int, tuple[int, int]] | None = (
            dict(quorum) if quorum is not None else None
        )
        self._classpath = classpath
        self.extra_config = dict(extra_config or {})  # more zoo.cfg lines
        self._auto_port = port is None
        self._port = port if port is not None else free_port()
        self.tls = tls
        self._tls_port = free_port() if tls is not None else None
        super().__init__(workdir=workdir, temp_prefix="zk-", log_name="zookeeper.log")
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "zoo.cfg"
        self.keystore_path = self.workdir / "tls-keystore.pem"

    # ------------------------------------------------------------ properties

    @property
    def port(self) -> int:
        """Client port (on 127.0.0.1)."""
        return self._port

    @property
    def host_port(self) -> str:
        """``"127.0.0.1:PORT"``, usable as a kazoo ``hosts`` string."""
        return f"127.0.0.1:{self._port}"

    @property
    def tls_port(self) -> int:
        """The TLS client port (on 127.0.0.1); ValueError for a server without ``tls``."""
        if self._tls_port is None:
            raise ValueError(f"{self.label} was started without tls")
        return self._tls_port

    @property
    def tls_host_port(self) -> str:
        """``"127.0.0.1:TLS_PORT"``."""
        return f"127.0.0.1:{self.tls_port}"

    @property
    def label(self) -> str:
        role = f" (myid {self.myid})" if self.myid is not None else ""
        return f"ZooKeeper on {self.host_port}{role}"

    def bound_ports(self) -> tuple[int, ...]:
        if self.quorum is None or self.myid is None:
            return (self._port,) if self._tls_port is None else (self._port, self._tls_port)
        return (self._port, *self.quorum[self.myid])

    # ------------------------------------------------------------ config

    def config_text(self) -> str:
        lines = [
            "# written by semaphore_recipes.devtools.zookeeper_server",
            f"tickTime={self.tick_time_ms}",
            f"initLimit={self.init_limit}",
            f"syncLimit={self.sync_limit}",
            f"dataDir={self.data_dir}",
            f"clientPort={self._port}",
            "clientPortAddress=127.0.0.1",
            # The default (60 connections per client IP) breaks many-client tests.
            "maxClientCnxns=0",
            f"minSessionTimeout={self.min_session_timeout_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            # Otherwise every server opens the Jetty admin server on :8080.
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            # Small transaction log preallocation (KiB) and frequent snapshots keep
            # the data directories of short-lived servers small.
            "preAllocSize=8192",
            "snapCount=10000",
            # Development and tests only: do not fsync the transaction log. A killed
            # JVM loses nothing (the kernel keeps the written pages); only a machine
            # crash could lose acknowledged writes. Never use this in production.
            "forceSync=no",
        ]
        lines += self._tls_config()
        # unknown zoo.cfg keys become system properties "zookeeper.<key>"
        lines += [f"{key}={value}" for key, value in self.extra_config.items()]
        if self.quorum is not None:
            lines.append("reconfigEnabled=false")
            for sid in sorted(self.quorum):
                peer, election = self.quorum[sid]
                lines.append(f"server.{sid}=127.0.0.1:{peer}:{election}")
        return "\n".join(lines) + "\n"

    def _tls_config(self) -> list[str]:
        if self.tls is None:
            return []
        ca = self.tls[2]
        return [
            f"secureClientPort={self._tls_port}",
            "secureClientPortAddress=127.0.0.1",
            f"serverCnxnFactory={NETTY_FACTORY}",
            f"ssl.keyStore.location={self.keystore_path}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={ca}",
            "ssl.trustStore.type=PEM",
            "ssl.clientAuth=need",
        ]

    def prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.myid is not None:
            (self.data_dir / "myid").write_text(f"{self.myid}\n")
        if self.tls is not None:
            certificate, key, _ = self.tls
            pem = Path(key).read_text() + Path(certificate).read_text()
            self.keystore_path.write_text(pem)
            self.keystore_path.chmod(0o600)
        self.config_path.write_text(self.config_text())

    def command(self) -> list[str]:
        classpath = self._classpath or find_zookeeper_classpath(tls=self.tls is not None)
        return [_find_java(), *JVM_FLAGS, "-cp", classpath, MAIN_CLASS, str(self.config_path)]

    # ------------------------------------------------------------ lifecycle

    def probe_ready(self) -> str | None:
        """The mode ``srvr`` reports (``standalone``, ``leader``...), None before."""
        with contextlib.suppress(OSError):
            return _parse_mode(self.four_letter("srvr", timeout=1.0))
        return None

    def may_move_ports(self) -> bool:
        # An ensemble member's port is in every member's config.
        return self._auto_port and self.quorum is None

    def move_ports(self) -> None:
        self._port = free_port()
        if self._tls_port is not None:
            self._tls_port = free_port()

    # ------------------------------------------------------------ inspection

    def four_letter(self, cmd: str, timeout: float = 5.0) -> str:
        """Send a four-letter-word command (``srvr``, ``mntr``, ``cons``, ...)."""
        with socket.create_connection(("127.0.0.1", self._port), timeout=timeout) as sock:
            sock.sendall(cmd.encode("ascii"))
            chunks: list[bytes] = []
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode("utf-8", "replace")

    def mntr(self) -> dict[str, int | float | str]:
        """``mntr`` as a dict; numeric values as int/float (e.g. ``zk_packets_received``).

        Each call itself costs the server 1 packet received and a few sent.
        """
        result: dict[str, int | float | str] = {}
        for line in self.four_letter("mntr").splitlines():
            key, sep, value = line.partition("\t")
            if sep and key:
                result[key.strip()] = _parse_number(value.strip())
        if not result:
            raise RuntimeError(f"{self.label} gave no mntr output")
        return result

    def mode(self, timeout: float = 5.0) -> str:
        """``"standalone"``, ``"leader"`` or ``"follower"``; RuntimeError if not serving."""
        out = self.four_letter("srvr", timeout=timeout)
        mode = _parse_mode(out)
        if mode is None:
            raise RuntimeError(f"{self.label} is not serving: {out.strip()!r}")
        return mode


# --------------------------------------------------------------------------- ensemble


class ZooKeeperEnsemble(ProcessGroup):
    """``size`` ZooKeeper servers forming one quorum on loopback.

    Member ``N`` lives in ``workdir/zkN`` (``workdir``: a temporary directory removed by
    :meth:`close` when none is given).
    """

    def __init__(
        self,
        size: int = 3,
        *,
        tick_time_ms: int = 200,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60000,
        workdir: str | os.PathLike[str] | None = None,
        classpath: str | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self._timing: dict[str, Any] = {
            "tick_time_ms": tick_time_ms,
            "min_session_timeout_ms": min_session_timeout_ms,
            "max_session_timeout_ms": max_session_timeout_ms,
            "classpath": classpath,
        }
        super().__init__(workdir=workdir, temp_prefix="zk-ensemble-")
        self.servers: list[ZooKeeperServer] = self._make_servers()

    def _make_servers(self) -> list[ZooKeeperServer]:
        ids = range(1, self.size + 1)
        quorum = {sid: (free_port(), free_port()) for sid in ids}
        return [
            ZooKeeperServer(
                workdir=self.workdir / f"zk{sid}",
                myid=sid,
                quorum=quorum,
                **self._timing,
            )
            for sid in ids
        ]

    @property
    def processes(self) -> list[ZooKeeperServer]:
        return self.servers

    @property
    def connect_string(self) -> str:
        """``"127.0.0.1:p1,127.0.0.1:p2,..."`` for kazoo's ``hosts``."""
        return ",".join(s.host_port for s in self.servers)

    def __repr__(self) -> str:
        return f"<ZooKeeperEnsemble {self.connect_string}>"

    def start(self, timeout: float = 60.0) -> ZooKeeperEnsemble:
        """Start every member and wait for a full quorum with exactly one leader.

        A port taken by another process meanwhile makes it start over on fresh ports
        (twice at most); otherwise :class:`ServerStartError` with every member's log.
        """
        if self._closed:
            raise RuntimeError("ensemble is closed")
        started = time.monotonic()
        deadline = started + timeout
        for attempt in range(3):
            for server in self.servers:
                server.spawn()
            try:
                self._wait(deadline - time.monotonic(), require_all=True)
            except ServerStartError:
                bind_failed = any(s.bind_failed() for s in self.servers)
                self.kill()
                if bind_failed and attempt < 2:
                    logger.warning("an ensemble port was taken; retrying on new ports")
                    for server in self.servers:
                        server.close()
                        shutil.rmtree(server.workdir, ignore_errors=True)
                    self.servers = self._make_servers()
                    continue
                raise
            logger.info(
                "ZooKeeper ensemble %s serving after %.2f s",
                self.connect_string,
                time.monotonic() - started,
            )
            return self
        raise AssertionError("unreachable: the last attempt returns or raises")

    def wait_for_quorum(self, timeout: float = 30.0) -> None:
        """Wait until every running member serves (leader/follower), exactly one leads.

        Needs a majority of members running. Raises :class:`ServerStartError` on timeout.
        """
        self._wait(timeout, require_all=False)

    def _wait(self, timeout: float, *, require_all: bool) -> None:
        deadline = time.monotonic() + timeout
        leader_modes = ("leader", "standalone") if self.size == 1 else ("leader",)
        while True:
            if require_all:
                for server in self.servers:
                    if not server.running:
                        raise ServerStartError(
                            f"ensemble member {server.myid} ({server.host_port}) exited; "
                            f"logs:\n{self.log_tail(60)}"
                        )
            running = [s for s in self.servers if s.running and not s.paused]
            modes: list[str | None] = []
            for server in running:
                try:
                    modes.append(server.mode(timeout=1.0))
                except (OSError, RuntimeError):
                    modes.append(None)
            leaders = sum(1 for m in modes if m in leader_modes)
            if (
                len(running) > self.size // 2
                and all(m in _SERVING_MODES for m in modes)
                and leaders == 1
            ):
                return
            if time.monotonic() >= deadline:
                summary = ", ".join(f"{s.myid}={m}" for s, m in zip(running, modes, strict=True))
                raise ServerStartError(
                    f"ZooKeeper ensemble has no quorum after {timeout:.1f} s "
                    f"(running members: {summary or 'none'}); logs:\n{self.log_tail(60)}"
                )
            time.sleep(0.05)

    def leader(self) -> ZooKeeperServer:
        """The member that currently leads (RuntimeError if none does)."""
        leader_modes = ("leader", "standalone") if self.size == 1 else ("leader",)
        for server in self.servers:
            if server.running and not server.paused:
                with contextlib.suppress(OSError, RuntimeError):
                    if server.mode(timeout=2.0) in leader_modes:
                        return server
        raise RuntimeError(f"no leader in {self!r}")

    def followers(self) -> list[ZooKeeperServer]:
        """Running members that currently follow."""
        result = []
        for server in self.servers:
            if server.running and not server.paused:
                with contextlib.suppress(OSError, RuntimeError):
                    if server.mode(timeout=2.0) == "follower":
                        result.append(server)
        return result

    def log_tail(self, lines: int = 200) -> str:
        """The log tails of all members, each under a header line."""
        parts = []
        for server in self.servers:
            state = "running" if server.running else "stopped"
            parts.append(f"===== zk{server.myid} {server.host_port} ({state}) =====")
            parts.append(server.log_tail(lines))
        return "\n".join(parts)


# --------------------------------------------------------------------------- dev-server


def start_dev_server(port: int | None) -> DevServer:
    """A standalone ZooKeeper for development on ``127.0.0.1:port`` (None: a free port).

    Its data lives in a temporary directory that ``close()`` removes. Raises
    :class:`ZooKeeperNotFound` (a :class:`ServerNotFound`) when ZooKeeper or Java is
    missing, and :class:`ServerStartError` when it does not serve within
    :data:`DEV_START_TIMEOUT` seconds.
    """
    classpath = find_zookeeper_classpath()
    server = ZooKeeperServer(port=port, classpath=classpath)
    server.start_or_close(DEV_START_TIMEOUT)
    jar = classpath.split(os.pathsep)[0]
    return DevServer(
        process=server,
        url=f"zookeeper://{server.host_port}",
        data_dir=server.workdir,
        description=f"ZooKeeper ({jar}) on {server.host_port}",
    )
