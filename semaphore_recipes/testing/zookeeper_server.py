"""Real ZooKeeper server processes for tests and development.

Starts Apache ZooKeeper (the Debian ``zookeeper`` package, 3.8) as a child JVM on
loopback, either standalone (:class:`ZooKeeperServer`) or as a small quorum
(:class:`ZooKeeperEnsemble`), and expires client sessions for real on the server
(:func:`expire_session`).

The module imports without kazoo and without Java; errors only happen on use.
Every JVM started here is killed, and every temporary directory created here
removed, when the Python process exits (``atexit``); JVMs started from the main
thread are also killed when the Python process dies abruptly (parent-death signal
via ``setpriv``, when available).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .programs import ProgramNotFound, find_optional_program, find_program

if TYPE_CHECKING:
    from kazoo.client import KazooClient

__all__ = [
    "ZooKeeperEnsemble",
    "ZooKeeperNotFound",
    "ZooKeeperServer",
    "expire_session",
    "find_zookeeper_classpath",
]

logger = logging.getLogger("semaphore_recipes.testing")

INSTALL_HINT = (
    "install it with `apt-get install -y zookeeper` (as root; the server needs Java 17, "
    "e.g. `apt-get install -y openjdk-17-jre-headless`), or point the ZOOKEEPER_CLASSPATH "
    "environment variable at the ZooKeeper jars"
)
SLF4J_SIMPLE_JAR = "/usr/share/java/slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

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


class ZooKeeperNotFound(RuntimeError):
    """No local ZooKeeper installation (or no Java) was found."""


# --------------------------------------------------------------------------- helpers


def _find_java() -> str:
    try:
        return find_program("java")
    except ProgramNotFound as exc:
        raise ZooKeeperNotFound(
            f"no `java` executable found (JAVA_HOME or PATH); {INSTALL_HINT}"
        ) from exc


def find_zookeeper_classpath() -> str:
    """Return the Java classpath for the ZooKeeper server.

    ``$ZOOKEEPER_CLASSPATH`` wins when set; otherwise the Debian jar
    ``/usr/share/java/zookeeper.jar`` (``zookeeper.jar`` in :mod:`.programs`; its
    manifest pulls in the dependencies), plus ``/usr/share/java/slf4j-simple.jar`` when
    present so that server logs appear. Raises :class:`ZooKeeperNotFound` when the jar
    or ``java`` is missing.
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
        classpath = os.pathsep.join(parts)
    _find_java()
    return classpath


_port_lock = threading.Lock()
_handed_out_ports: set[int] = set()


def _free_port() -> int:
    """A currently free loopback TCP port, never handed out twice by this process.

    The kernel picks it (bind to port 0); remembering what we handed out keeps two
    servers of this process from ever being given the same port. A race with another
    process grabbing the port before the JVM binds it remains possible but unlikely;
    the start methods retry with fresh ports when the server logs a bind failure.
    """
    with _port_lock:
        for _ in range(200):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out_ports:
                _handed_out_ports.add(port)
                return port
    raise RuntimeError("could not find a free loopback port")


# Every JVM we started and have not reaped yet, killed at interpreter exit, and
# the temporary directories we created and have not removed yet.
_live_processes: dict[int, subprocess.Popen[bytes]] = {}
_temp_dirs: set[Path] = set()
_live_lock = threading.Lock()


def _kill_leftovers() -> None:
    with _live_lock:
        procs = list(_live_processes.values())
        _live_processes.clear()
        dirs = list(_temp_dirs)
        _temp_dirs.clear()
    for proc in procs:
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


def _make_temp_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    with _live_lock:
        _temp_dirs.add(path)
    return path


def _remove_temp_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _live_lock:
        _temp_dirs.discard(path)


atexit.register(_kill_leftovers)


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


def _tail(path: Path, lines: int, start: int = 0) -> str:
    """Last ``lines`` lines of ``path`` (from byte ``start`` on)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(start, size - 512 * 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


# --------------------------------------------------------------------------- server


class ZooKeeperServer:
    """One ZooKeeper server JVM on 127.0.0.1.

    Standalone by default. :class:`ZooKeeperEnsemble` creates members with ``myid``
    and ``quorum`` (``{myid: (peer_port, election_port)}`` for every member).

    Files live in ``workdir`` (a temporary directory removed by :meth:`close` when
    none is given): ``zoo.cfg``, ``data/`` and ``zookeeper.log`` (JVM stdout+stderr,
    appended across restarts).
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
    ) -> None:
        if min_session_timeout_ms > max_session_timeout_ms:
            raise ValueError("min_session_timeout_ms must not exceed max_session_timeout_ms")
        if quorum is not None and (myid is None or myid not in quorum):
            raise ValueError("an ensemble member needs a myid that is a key of quorum")
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
        self._port = port if port is not None else _free_port()
        self._owns_workdir = workdir is None
        self.workdir = _make_temp_dir("zk-") if workdir is None else Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "zoo.cfg"
        self.log_path = self.workdir / "zookeeper.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._log_offset = 0
        self._closed = False

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
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def is_running(self) -> bool:
        """True while the JVM process exists (also when paused)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def is_paused(self) -> bool:
        return self._paused and self.is_running

    def __repr__(self) -> str:
        role = f" myid={self.myid}" if self.myid is not None else ""
        state = "running" if self.is_running else "stopped"
        return f"<ZooKeeperServer {self.host_port}{role} {state}>"

    # ------------------------------------------------------------ config

    def config_text(self) -> str:
        lines = [
            "# written by semaphore_recipes.testing.zookeeper_server",
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
            # the data directories of short-lived test servers small.
            "preAllocSize=8192",
            "snapCount=10000",
            # Tests only: do not fsync the transaction log. A killed JVM loses
            # nothing (the kernel keeps the written pages); only a machine crash
            # could lose acknowledged writes. Never use this in production.
            "forceSync=no",
        ]
        # unknown zoo.cfg keys become system properties "zookeeper.<key>"
        lines += [f"{key}={value}" for key, value in self.extra_config.items()]
        if self.quorum is not None:
            lines.append("reconfigEnabled=false")
            for sid in sorted(self.quorum):
                peer, election = self.quorum[sid]
                lines.append(f"server.{sid}=127.0.0.1:{peer}:{election}")
        return "\n".join(lines) + "\n"

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.myid is not None:
            (self.data_dir / "myid").write_text(f"{self.myid}\n")
        self.config_path.write_text(self.config_text())

    # ------------------------------------------------------------ lifecycle

    def _spawn(self) -> None:
        """Launch the JVM without waiting for it to serve."""
        if self._closed:
            raise RuntimeError("server is closed")
        if self.is_running:
            raise RuntimeError(f"{self!r} is already running")
        self._reap()
        classpath = self._classpath or find_zookeeper_classpath()
        java = _find_java()
        self._write_config()
        cmd = [java, *JVM_FLAGS, "-cp", classpath, MAIN_CLASS, str(self.config_path)]
        setpriv = find_optional_program("setpriv")
        if setpriv is not None and threading.current_thread() is threading.main_thread():
            # Kill the JVM if this process dies without running atexit handlers. The
            # parent-death signal follows the *thread* that forked, hence main only.
            cmd = [setpriv, "--pdeathsig", "KILL", *cmd]
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"==== {stamp} starting ZooKeeper on {self.host_port} ====\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
            )
        self._paused = False
        with _live_lock:
            _live_processes[self._proc.pid] = self._proc
        logger.debug("started ZooKeeper pid %d on %s", self._proc.pid, self.host_port)

    def _run_log(self, lines: int = 200) -> str:
        """Tail of the log of the current (or last) run only."""
        return _tail(self.log_path, lines, self._log_offset)

    def _bind_failed(self) -> bool:
        return "Address already in use" in self._run_log(400)

    def wait_ready(self, timeout: float = 30.0) -> str:
        """Wait until ``srvr`` answers with a ``Mode:`` line; return the mode.

        Raises RuntimeError (with the log tail) if the process exits or the timeout
        passes first.
        """
        deadline = time.monotonic() + timeout
        while True:
            proc = self._proc
            if proc is None:
                raise RuntimeError(f"{self!r} was not started")
            code = proc.poll()
            if code is not None:
                self._reap()
                raise RuntimeError(
                    f"ZooKeeper on {self.host_port} exited with code {code} while starting; "
                    f"log tail ({self.log_path}):\n{self._run_log()}"
                )
            with contextlib.suppress(OSError):
                mode = _parse_mode(self.four_letter("srvr", timeout=1.0))
                if mode is not None:
                    return mode
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"ZooKeeper on {self.host_port} not serving after {timeout:.1f}s; "
                    f"log tail ({self.log_path}):\n{self._run_log()}"
                )
            time.sleep(0.05)

    def start(self, timeout: float = 30.0) -> None:
        """Start the JVM and wait until it serves (``srvr`` reports a ``Mode:``).

        On failure the process is killed and RuntimeError raised with the log tail.
        An automatically chosen port that turns out to be taken is replaced and the
        start retried (standalone servers only).
        """
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        for attempt in range(3):
            self._spawn()
            try:
                mode = self.wait_ready(max(0.1, deadline - time.monotonic()))
            except RuntimeError:
                bind_failed = self._bind_failed()
                self.kill()
                if bind_failed and self._auto_port and self.quorum is None and attempt < 2:
                    logger.warning("port %d was taken; retrying on a new port", self._port)
                    self._port = _free_port()
                    continue
                raise
            logger.info(
                "ZooKeeper %s serving as %s after %.2fs",
                self.host_port,
                mode,
                time.monotonic() - started,
            )
            return

    def _terminate(self) -> None:
        """Send SIGTERM (and SIGCONT if paused) without waiting."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
                if self._paused:
                    proc.send_signal(signal.SIGCONT)

    def _wait_stopped(self, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            logger.warning("ZooKeeper pid %d ignored SIGTERM; killing it", proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        self._reap()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL. No-op if stopped."""
        self._terminate()
        self._wait_stopped(timeout)

    def kill(self) -> None:
        """SIGKILL (a crash: no clean shutdown) and wait for the process to go."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.wait()
        self._reap()

    def _reap(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            with _live_lock:
                _live_processes.pop(proc.pid, None)
            self._paused = False

    def restart(self, timeout: float = 30.0) -> None:
        """Stop (cleanly) and start again with the same port and data."""
        self.stop()
        self.start(timeout)

    def pause(self) -> None:
        """Freeze the JVM (SIGSTOP): connections stay open but nothing answers.

        Returns once every JVM thread is stopped (SIGSTOP takes effect
        asynchronously; a thread running on another CPU keeps going briefly).
        """
        if not self.is_running or self._proc is None:
            raise RuntimeError(f"{self!r} is not running")
        self._proc.send_signal(signal.SIGSTOP)
        self._paused = True
        self._wait_all_threads(stopped=True)

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)
            self._wait_all_threads(stopped=False)
        self._paused = False

    def _wait_all_threads(self, *, stopped: bool, timeout: float = 5.0) -> None:
        proc = self._proc
        if proc is None:
            return
        task_dir = Path(f"/proc/{proc.pid}/task")
        if not task_dir.is_dir():  # not Linux: give the signal a moment
            time.sleep(0.1)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = []
            for stat in task_dir.glob("*/stat"):
                with contextlib.suppress(OSError):
                    # "pid (comm) S ...": the state follows the last ')'.
                    states.append(stat.read_text().rpartition(")")[2].split()[0])
            if states and all((st in ("T", "t")) == stopped for st in states):
                return
            if proc.poll() is not None:
                return
            time.sleep(0.005)
        logger.warning(
            "ZooKeeper pid %d: threads did not %s in time",
            proc.pid,
            "stop" if stopped else "continue",
        )

    def close(self) -> None:
        """Stop the server and remove the workdir if it was a temporary one."""
        if self._closed:
            return
        try:
            self.stop()
        finally:
            self._closed = True
            if self._owns_workdir:
                _remove_temp_dir(self.workdir)

    def __enter__(self) -> ZooKeeperServer:
        if not self.is_running:
            try:
                self.start()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
            raise RuntimeError(f"ZooKeeper on {self.host_port} gave no mntr output")
        return result

    def mode(self, timeout: float = 5.0) -> str:
        """``"standalone"``, ``"leader"`` or ``"follower"``; RuntimeError if not serving."""
        out = self.four_letter("srvr", timeout=timeout)
        mode = _parse_mode(out)
        if mode is None:
            raise RuntimeError(f"ZooKeeper on {self.host_port} is not serving: {out.strip()!r}")
        return mode

    def log_tail(self, lines: int = 200) -> str:
        """The last lines of ``zookeeper.log`` (all runs)."""
        return _tail(self.log_path, lines)


# --------------------------------------------------------------------------- ensemble


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers forming one quorum on loopback."""

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
        self._owns_workdir = workdir is None
        self.workdir = _make_temp_dir("zk-ensemble-") if workdir is None else Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.servers: list[ZooKeeperServer] = self._make_servers()
        self._closed = False

    def _make_servers(self) -> list[ZooKeeperServer]:
        ids = range(1, self.size + 1)
        quorum = {sid: (_free_port(), _free_port()) for sid in ids}
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
    def connect_string(self) -> str:
        """``"127.0.0.1:p1,127.0.0.1:p2,..."`` for kazoo's ``hosts``."""
        return ",".join(s.host_port for s in self.servers)

    def __repr__(self) -> str:
        return f"<ZooKeeperEnsemble {self.connect_string}>"

    def start(self, timeout: float = 60.0) -> None:
        """Start every member and wait for a full quorum with exactly one leader."""
        if self._closed:
            raise RuntimeError("ensemble is closed")
        started = time.monotonic()
        deadline = started + timeout
        for attempt in range(3):
            for server in self.servers:
                if not server.is_running:
                    server._spawn()
            try:
                self._wait(deadline - time.monotonic(), require_all=True)
            except RuntimeError:
                bind_failed = any(s._bind_failed() for s in self.servers)
                self._kill_all()
                if bind_failed and attempt < 2:
                    logger.warning("an ensemble port was taken; retrying on new ports")
                    for server in self.servers:
                        shutil.rmtree(server.workdir, ignore_errors=True)
                    self.servers = self._make_servers()
                    continue
                raise
            logger.info(
                "ZooKeeper ensemble %s serving after %.2fs",
                self.connect_string,
                time.monotonic() - started,
            )
            return

    def wait_for_quorum(self, timeout: float = 30.0) -> None:
        """Wait until every running member serves (leader/follower), exactly one leads.

        Needs a majority of members running. Raises RuntimeError on timeout.
        """
        self._wait(timeout, require_all=False)

    def _wait(self, timeout: float, *, require_all: bool) -> None:
        deadline = time.monotonic() + timeout
        leader_modes = ("leader", "standalone") if self.size == 1 else ("leader",)
        while True:
            if require_all:
                for server in self.servers:
                    if not server.is_running:
                        raise RuntimeError(
                            f"ensemble member {server.myid} ({server.host_port}) exited; "
                            f"logs:\n{self.log_tail(60)}"
                        )
            running = [s for s in self.servers if s.is_running and not s.is_paused]
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
                raise RuntimeError(
                    f"ZooKeeper ensemble has no quorum after {timeout:.1f}s "
                    f"(running members: {summary or 'none'}); logs:\n{self.log_tail(60)}"
                )
            time.sleep(0.05)

    def leader(self) -> ZooKeeperServer:
        """The member that currently leads (RuntimeError if none does)."""
        leader_modes = ("leader", "standalone") if self.size == 1 else ("leader",)
        for server in self.servers:
            if server.is_running and not server.is_paused:
                with contextlib.suppress(OSError, RuntimeError):
                    if server.mode(timeout=2.0) in leader_modes:
                        return server
        raise RuntimeError(f"no leader in {self!r}")

    def followers(self) -> list[ZooKeeperServer]:
        """Running members that currently follow."""
        result = []
        for server in self.servers:
            if server.is_running and not server.is_paused:
                with contextlib.suppress(OSError, RuntimeError):
                    if server.mode(timeout=2.0) == "follower":
                        result.append(server)
        return result

    def _kill_all(self) -> None:
        for server in self.servers:
            server.kill()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every member at once, then wait (SIGKILL after ``timeout``)."""
        for server in self.servers:
            server._terminate()
        deadline = time.monotonic() + timeout
        for server in self.servers:
            server._wait_stopped(deadline - time.monotonic())

    def close(self) -> None:
        """Stop all members and remove the workdir if it was a temporary one."""
        if self._closed:
            return
        try:
            self.stop()
            for server in self.servers:
                server.close()
        finally:
            self._closed = True
            if self._owns_workdir:
                _remove_temp_dir(self.workdir)

    def log_tail(self, lines: int = 200) -> str:
        """The log tails of all members, each under a header line."""
        parts = []
        for server in self.servers:
            state = "running" if server.is_running else "stopped"
            parts.append(f"===== zk{server.myid} {server.host_port} ({state}) =====")
            parts.append(server.log_tail(lines))
        return "\n".join(parts)

    def __enter__(self) -> ZooKeeperEnsemble:
        if not all(s.is_running for s in self.servers):
            try:
                self.start()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# --------------------------------------------------------------------------- sessions


def _hosts_string(client: KazooClient) -> str:
    # kazoo keeps the parsed host list as ``client.hosts``: a list of (host, port)
    # tuples; the chroot lives separately in ``client.chroot`` and does not matter
    # for the session.
    parts = []
    for host, port in client.hosts:
        parts.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return ",".join(parts)


def expire_session(
    client: KazooClient,
    timeout: float = 10.0,
    *,
    hosts: str | None = None,
) -> None:
    """Make the ZooKeeper server expire ``client``'s session, for real.

    A second client attaches to the same session (id + password), which makes the
    server drop the original connection, and then closes the session. The original
    client, on reconnecting, is told the session expired. Returns once ``client``
    has reported ``KazooState.LOST``; raises TimeoutError otherwise. Should the
    original client win the race and re-attach first, the steal is repeated.
    """
    from kazoo.client import KazooClient
    from kazoo.protocol.states import KazooState, KeeperState

    from ..zookeeper import _kazoo_compat

    lost = threading.Event()

    def listener(state: Any) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True
        return False

    client_id = client.client_id
    if client_id is None:  # suspended right now; the session may still be alive
        session_id = _kazoo_compat.session_id(client)
        if session_id is None:
            raise RuntimeError("client has no ZooKeeper session to expire")
        client_id = (session_id, _kazoo_compat.session_password(client))
    session_id = client_id[0]
    if hosts is None:
        hosts = _hosts_string(client)

    deadline = time.monotonic() + timeout
    client.add_listener(listener)
    try:
        attempt = 0
        while not lost.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempt += 1
            twin = KazooClient(
                hosts=hosts,
                client_id=client_id,
                connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5},
            )
            twin_state = "unknown"
            try:
                twin.start_async()
                twin_deadline = time.monotonic() + min(remaining, 5.0)
                while time.monotonic() < twin_deadline and not lost.is_set():
                    if twin.connected:
                        current = twin.client_id
                        twin_state = "attached" if current and current[0] == session_id else "gone"
                        break
                    if twin.client_state == KeeperState.EXPIRED_SESSION:
                        twin_state = "gone"
                        break
                    time.sleep(0.005)
            finally:
                # Closing the twin closes the session it attached to.
                twin.stop()
                twin.close()
            logger.debug(
                "expire_session: attempt %d for session 0x%x: %s", attempt, session_id, twin_state
            )
            # The original client notices on its next reconnect attempt.
            wait = 30.0 if twin_state == "gone" else 2.0
            lost.wait(max(0.0, min(deadline - time.monotonic(), wait)))
    finally:
        client.remove_listener(listener)
    if not lost.is_set():
        raise TimeoutError(f"session 0x{session_id:x} was not reported LOST within {timeout:.1f}s")
