"""One started server process: the base of the ZooKeeper, etcd and Redis launchers.

:class:`ManagedProcess` owns what every launched server needs, whatever the program: a
work directory (a temporary one, made here and removed by :meth:`~ManagedProcess.close`,
or one the caller gives and keeps), a log file that collects the process's stdout and
stderr across restarts, a start that waits for a readiness check with a timeout (and
moves to fresh ports when an automatically chosen one was taken meanwhile), stop, kill,
pause and resume, and the tail of the log. A subclass says how to run its program
(:meth:`~ManagedProcess.command`), how to tell that it serves
(:meth:`~ManagedProcess.probe_ready`) and which ports it binds.

Processes never outlive this one: each is killed, and each temporary directory removed,
when the interpreter exits (``atexit``), and a process started from the main thread is
also killed by the kernel when this process dies without running ``atexit`` handlers
(``setpriv --pdeathsig``, where available). A temporary directory stays behind only in
that last case. Only the standard library is imported here.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from .programs import find_optional_program

__all__ = [
    "ManagedProcess",
    "ProcessGroup",
    "ServerNotFound",
    "ServerStartError",
    "free_port",
    "port_is_free",
]

logger = logging.getLogger("semaphore_recipes.servers")

# typing.Self needs Python 3.11
_Process = TypeVar("_Process", bound="ManagedProcess")
_Group = TypeVar("_Group", bound="ProcessGroup")

#: Attempts of :meth:`ManagedProcess.start` when the chosen ports turn out to be taken.
START_ATTEMPTS = 3
#: Log lines quoted in a start error.
ERROR_LOG_LINES = 100
#: What etcd and the JVM both print (in either case) when a port is taken.
BIND_FAILURE = "address already in use"


class ServerNotFound(RuntimeError):
    """The server program (or what it needs, such as Java) is not installed; the message
    says how to install it."""


class ServerStartError(RuntimeError):
    """A server process could not be run, exited while starting, or did not become ready
    in time; the message quotes the tail of its log."""


# --------------------------------------------------------------------------- ports

_port_lock = threading.Lock()
_handed_out_ports: set[int] = set()


def free_port(*, highest: int = 65535, paired_offset: int = 0) -> int:
    """A currently free loopback TCP port, never handed out twice by this process.

    The kernel picks it (bind to port 0); remembering what was handed out keeps two
    servers of this process from being given the same port. Another process may still
    take it before the server binds it: :meth:`ManagedProcess.start` then retries on
    fresh ports where it may.

    ``highest`` and ``paired_offset`` (a Redis Cluster node's bus listens on its port
    + 10000, so its port must be at most 55535 with that one free too): a port drawn
    at random below ``highest`` whose ``port + paired_offset`` is free as well.
    """
    with _port_lock:
        for _ in range(200):
            if highest >= 65535 and not paired_offset:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind(("127.0.0.1", 0))
                    wanted: tuple[int, ...] = (int(sock.getsockname()[1]),)
            else:
                port = random.randint(20000, highest)
                wanted = (port, port + paired_offset) if paired_offset else (port,)
                if not all(port_is_free(p) for p in wanted):
                    continue
            if not _handed_out_ports.intersection(wanted):
                _handed_out_ports.update(wanted)
                return wanted[0]
    raise RuntimeError("could not find a free loopback port")


def port_is_free(port: int) -> bool:
    """True when nothing listens on ``127.0.0.1:port``.

    Connections left in TIME_WAIT do not count: the servers started here bind with
    SO_REUSEADDR, as this check does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# --------------------------------------------------------------------------- leftovers

# Every process started and not reaped yet, and every temporary directory made and not
# removed yet: both go at interpreter exit. Popen objects (not the ManagedProcess) are
# kept so that a server object dropped without close() still has its process killed.
_live_processes: dict[int, subprocess.Popen[bytes]] = {}
_temp_dirs: set[Path] = set()
_live_lock = threading.Lock()


@atexit.register
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


def make_temp_dir(prefix: str) -> Path:
    """A new temporary directory, removed at interpreter exit unless removed earlier
    with :func:`remove_temp_dir`."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    with _live_lock:
        _temp_dirs.add(path)
    return path


def remove_temp_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _live_lock:
        _temp_dirs.discard(path)


def tail(path: Path, lines: int, start: int = 0) -> str:
    """The last ``lines`` lines of ``path`` (from byte ``start`` on); "" if missing."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(start, size - 512 * 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


# --------------------------------------------------------------------------- the base


class ManagedProcess(abc.ABC):
    """A server program run as a child process, with its work directory and log.

    ``workdir`` None makes a temporary directory (named ``temp_prefix...``) that
    :meth:`close` removes; a given directory is created if needed and kept. The log
    file ``workdir/log_name`` collects stdout and stderr of every run, each run
    starting with a ``==== <time> starting <label> ====`` line.

    Subclasses define :meth:`command`, :meth:`probe_ready`, :attr:`label` and
    :meth:`bound_ports`, and may define :meth:`may_move_ports`/:meth:`move_ports` and
    :meth:`prepare`.
    """

    def __init__(
        self,
        *,
        workdir: str | os.PathLike[str] | None,
        temp_prefix: str,
        log_name: str,
    ) -> None:
        self._owns_workdir = workdir is None
        self.workdir = make_temp_dir(temp_prefix) if workdir is None else Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / log_name
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._log_offset = 0
        self._closed = False

    # ------------------------------------------------------------ what subclasses say

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """Names the server in logs and errors, e.g. ``"etcd n0 on 127.0.0.1:2379"``."""

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The command line that runs the server (found programs, flags, config)."""

    @abc.abstractmethod
    def probe_ready(self) -> str | None:
        """One quick readiness check: a short word on the server's state once it serves
        (e.g. ZooKeeper's mode), None while it does not yet. Must not raise OSError."""

    @abc.abstractmethod
    def bound_ports(self) -> tuple[int, ...]:
        """The loopback ports the server listens on, its client port first (waited for
        before a start)."""

    def prepare(self) -> None:  # noqa: B027 - optional: etcd takes everything as flags
        """Write what the server reads at start (config files); runs before each spawn."""

    def may_move_ports(self) -> bool:
        """Whether :meth:`start` may move the server to fresh ports when one is taken:
        only when it chose them itself and nothing depends on them. Asked once per
        :meth:`start`, before the first spawn."""
        return False

    def move_ports(self) -> None:
        """Pick fresh ports (only called when :meth:`may_move_ports` said so)."""
        raise NotImplementedError

    # ------------------------------------------------------------ state

    @property
    def pid(self) -> int | None:
        """Process id while started (also after it exited, until reaped)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the process exists (also when paused)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume` while the process exists."""
        return self._paused and self.running

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.label} {state}>"

    # ------------------------------------------------------------ starting

    def spawn(self) -> None:
        """Launch the process without waiting for it to serve (see :meth:`wait_ready`).

        No-op while it runs. Raises :class:`ServerNotFound` when the program is missing
        and :class:`ServerStartError` when it cannot be executed.
        """
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        if self.running:
            return
        self._reap()
        self._wait_ports_free(5.0)
        cmd = self.command()
        self.prepare()
        setpriv = find_optional_program("setpriv")
        if setpriv is not None and threading.current_thread() is threading.main_thread():
            # Killed with this process even without atexit (SIGKILL, a crash). The
            # parent-death signal follows the *thread* that forked, hence main only.
            cmd = [setpriv, "--pdeathsig", "KILL", *cmd]
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"==== {stamp} starting {self.label} ====\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    # Ctrl-C in a terminal reaches this process only: it stops the
                    # server itself, in order.
                    start_new_session=True,
                )
            except OSError as exc:
                raise ServerStartError(f"could not run {cmd[0]} for {self.label}: {exc}") from exc
        self._proc = proc
        self._paused = False
        with _live_lock:
            _live_processes[proc.pid] = proc
        logger.debug("started %s: pid %d", self.label, proc.pid)

    def _wait_ports_free(self, timeout: float) -> None:
        """A restarted server reuses its ports: give the old process time to let go."""
        deadline = time.monotonic() + timeout
        while not all(port_is_free(port) for port in self.bound_ports()):
            if time.monotonic() >= deadline:
                return  # the start then fails on the port, and says so
            time.sleep(0.05)

    def wait_ready(self, timeout: float = 30.0) -> str:
        """Wait until :meth:`probe_ready` answers; return its answer.

        Raises :class:`ServerStartError`, quoting this run's log, when the process
        exits first or ``timeout`` seconds pass.
        """
        deadline = time.monotonic() + timeout
        while True:
            proc = self._proc
            if proc is None:
                raise ServerStartError(f"{self.label} was not started")
            code = proc.poll()
            if code is not None:
                self._reap()
                raise ServerStartError(
                    f"{self.label} exited with code {code} while starting; "
                    f"log tail ({self.log_path}):\n{self.run_log()}"
                )
            state = self.probe_ready()
            if state is not None:
                return state
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"{self.label} not serving after {timeout:.1f} s; "
                    f"log tail ({self.log_path}):\n{self.run_log()}"
                )
            time.sleep(0.05)

    def start(self: _Process, timeout: float = 30.0) -> _Process:
        """Start the process and wait until it serves; return ``self``.

        On failure the process is killed and :class:`ServerStartError` raised (or
        :class:`ServerNotFound`); the work directory stays until :meth:`close`. Ports the
        server chose itself that another process took meanwhile are replaced and the
        start retried (see :meth:`may_move_ports`).
        """
        started = time.monotonic()
        deadline = started + timeout
        movable = self.may_move_ports()
        for attempt in range(1, START_ATTEMPTS + 1):
            self.spawn()
            try:
                state = self.wait_ready(max(0.1, deadline - time.monotonic()))
            except ServerStartError:
                bind_failed = self.bind_failed()
                self.kill()
                if not (bind_failed and movable and attempt < START_ATTEMPTS):
                    raise
                logger.warning("%s: a port was taken; retrying on fresh ports", self.label)
                self.move_ports()
                continue
            logger.info(
                "%s serving (%s) after %.2f s", self.label, state, time.monotonic() - started
            )
            return self
        raise AssertionError("unreachable: the last attempt returns or raises")

    def start_or_close(self: _Process, timeout: float = 30.0) -> _Process:
        """:meth:`start`; when that fails, :meth:`close` (removing a temporary work
        directory) before the error propagates."""
        try:
            return self.start(timeout)
        except BaseException:
            self.close()
            raise

    def restart(self: _Process, timeout: float = 30.0) -> _Process:
        """Stop (cleanly) and start again: same ports, same data."""
        self.stop()
        return self.start(timeout)

    # ------------------------------------------------------------ stopping

    def terminate(self) -> None:
        """Send SIGTERM (and SIGCONT when paused, so that it is handled) without
        waiting; :meth:`wait_stopped` waits. Lets a caller stop several at once."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
                if self._paused:
                    proc.send_signal(signal.SIGCONT)

    def wait_stopped(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the process to exit, then SIGKILL it."""
        proc = self._proc
        if proc is None:
            return
        try:
            proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            logger.warning("%s (pid %d) ignored SIGTERM; killing it", self.label, proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        self._reap()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL. No-op if stopped."""
        self.terminate()
        self.wait_stopped(timeout)

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
            self._proc = None
            self._paused = False

    def close(self) -> None:
        """Stop the process and, when the work directory is a temporary one, remove it.

        With a temporary directory the process is killed (its data goes anyway);
        with a given one it is stopped cleanly, leaving consistent data. Idempotent;
        the object cannot be started again.
        """
        if self._closed:
            return
        try:
            if self._owns_workdir:
                self.kill()
            else:
                self.stop()
        finally:
            self._closed = True
            if self._owns_workdir:
                remove_temp_dir(self.workdir)

    def __enter__(self: _Process) -> _Process:
        if not self.running:
            self.start_or_close()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ pausing

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): connections stay open but nothing answers.

        Returns once every thread is stopped (SIGSTOP takes effect asynchronously; a
        thread running on another CPU keeps going briefly). RuntimeError if not running.
        """
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"{self!r} is not running")
        proc.send_signal(signal.SIGSTOP)
        self._paused = True
        self._wait_all_threads(stopped=True)

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
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
                with contextlib.suppress(OSError, IndexError):
                    # "pid (comm) S ...": the state follows the last ')'.
                    states.append(stat.read_text().rpartition(")")[2].split()[0])
            if states and all((state in ("T", "t")) == stopped for state in states):
                return
            if proc.poll() is not None:
                return
            time.sleep(0.005)
        logger.warning(
            "%s (pid %d): threads did not %s in time",
            self.label,
            proc.pid,
            "stop" if stopped else "continue",
        )

    # ------------------------------------------------------------ logs

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log (all runs)."""
        return tail(self.log_path, lines)

    def bind_failed(self) -> bool:
        """Whether this run's log says that a port was taken."""
        return BIND_FAILURE in self.run_log(ERROR_LOG_LINES).lower()

    def run_log(self, lines: int = ERROR_LOG_LINES) -> str:
        """The last ``lines`` lines of the log of the current (or last) run only."""
        return tail(self.log_path, lines, self._log_offset)


# --------------------------------------------------------------------------- groups


class ProcessGroup(abc.ABC):
    """Several :class:`ManagedProcess` members forming one service (a ZooKeeper
    ensemble, an etcd cluster), each in its own directory under the group's ``workdir``
    (a temporary one, made here and removed by :meth:`close`, when None is given).

    Subclasses create the members and define :attr:`processes` and :meth:`start`.
    """

    def __init__(self, *, workdir: str | os.PathLike[str] | None, temp_prefix: str) -> None:
        self._owns_workdir = workdir is None
        self.workdir = make_temp_dir(temp_prefix) if workdir is None else Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._closed = False

    @property
    @abc.abstractmethod
    def processes(self) -> Sequence[ManagedProcess]:
        """The members, in order."""

    @abc.abstractmethod
    def start(self: _Group, timeout: float = 60.0) -> _Group:
        """Start every member and wait until the group serves; return ``self``."""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every member at once, then wait (SIGKILL after ``timeout``); data kept."""
        for process in self.processes:
            process.terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            process.wait_stopped(deadline - time.monotonic())

    def kill(self) -> None:
        """SIGKILL every member (a crash of the whole group)."""
        for process in self.processes:
            process.kill()

    def close(self) -> None:
        """Stop every member and, when the work directory is a temporary one, remove it
        (killing the members first: their data goes anyway). Idempotent."""
        if self._closed:
            return
        try:
            if self._owns_workdir:
                self.kill()
            else:
                self.stop()
            for process in self.processes:
                process.close()
        finally:
            self._closed = True
            if self._owns_workdir:
                remove_temp_dir(self.workdir)

    def __enter__(self: _Group) -> _Group:
        if not all(process.running for process in self.processes):
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
