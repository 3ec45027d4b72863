"""Black-box helpers for the command line: it always runs as a separate process.

``cli(...)`` runs ``python -m semaphore_recipes.cli`` to the end; ``Spawned`` starts one
in the background with its output in files (a pipe left open by a grandchild could hang
a read). ``Store`` reads and breaks the store behind the CLI's back, per backend.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.mysql_harness import MySQLHarness
from semaphore_recipes.testing.postgresql_harness import PostgreSQLHarness

CLI = [sys.executable, "-m", "semaphore_recipes.cli"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEMAPHORE_RECIPES_")}
    env.update(extra)
    return env


def cli(
    *args: str, timeout: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env() if env is None else env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> None:
    """An expected failure: one line on stderr, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("semaphore-recipes: "), lines


@dataclass
class Spawned:
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running after {timeout} s; stderr: {self.stderr()}"
            ) from None

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")


# SIGINT/SIGQUIT as a terminal's foreground job has them, even if the test run itself
# was started with them ignored (a background job), then exec the CLI. Not a preexec_fn:
# that makes subprocess fork() this process, which has grpc loaded; grpc's fork handlers
# restart its poller thread in the child, and subprocess closing fds before the exec
# then aborts that child now and then ("epoll_wait error: Bad file descriptor", -6).
_DEFAULT_SIGNALS_THEN_EXEC = (
    "import os, signal, sys; "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.signal(signal.SIGQUIT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@dataclass
class Spawner:
    tmp: Path
    procs: list[Spawned] = field(default_factory=list)

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Spawned:
        n = len(self.procs)
        out, err = self.tmp / f"cli-{n}.out", self.tmp / f"cli-{n}.err"
        with out.open("wb") as fo, err.open("wb") as fe:
            proc = subprocess.Popen(
                [sys.executable, "-c", _DEFAULT_SIGNALS_THEN_EXEC, *CLI, *args],
                stdin=subprocess.DEVNULL,
                stdout=fo,
                stderr=fe,
                env=clean_env() if env is None else env,
            )
        spawned = Spawned(proc, out, err)
        self.procs.append(spawned)
        return spawned


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawner]:
    spawner = Spawner(tmp_path)
    yield spawner
    for s in spawner.procs:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
        # shown with the report when the test failed
        print(f"--- {s.proc.args!r} exited {s.proc.returncode}; stderr:\n{s.stderr()}")


class Lines:
    """The stdout lines of a process, read by a thread so a wait can have a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        import queue
        import threading

        self.proc = proc
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def next(self, timeout: float) -> str:
        """The next line; AssertionError if none comes in time or the output ended."""
        import queue

        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no output within {timeout} s (exit {self.proc.poll()})"
            ) from None
        if line is None:
            raise AssertionError(f"output ended (exit {self.proc.wait()})")
        return line

    def rest(self, timeout: float) -> str:
        """Everything else, until the output ends."""
        out = []
        while True:
            try:
                out.append(self.next(timeout))
            except AssertionError:
                return "".join(out)


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def listening_address(spawned: Spawned, what: str) -> str:
    """The ``host:port`` a spawned server (``hold``, ``exporter``) says it listens on."""
    found: list[str] = []

    def ready() -> bool:
        found[:] = [
            line.split("listening on http://", 1)[1].split()[0]
            for line in spawned.stderr().splitlines()
            if "listening on http://" in line
        ]
        return bool(found) or spawned.proc.poll() is not None

    wait_for(ready, 30, what)
    assert found, spawned.stderr()
    return found[0]


#: the stores whose harness lists their semaphores and entries from their tables
SQL_STORES = ("postgresql", "mysql")


@dataclass
class Store:
    """The service of the test plus ways to look at and break what is stored."""

    service: Harness
    admin: Any
    namespace: str

    @property
    def kind(self) -> str:
        return self.service.kind

    @property
    def url(self) -> str:
        return self.service.url

    def stored(self, name: str) -> bool:
        """Whether the semaphore exists in the store (read with the admin client)."""
        if self.kind == "redis":
            return bool(self.admin.exists(f"{self.namespace.strip('/')}:s:{name}:cfg"))
        if self.kind in SQL_STORES:
            assert isinstance(self.service, (PostgreSQLHarness, MySQLHarness))
            return name in self.service.semaphores()
        if self.kind == "zookeeper":
            return self.admin.exists(f"{self.namespace}/semaphore_recipes/{name}") is not None
        return bool(self.admin.range(f"{self.namespace}/{name}/config".encode()).kvs)

    def entries(self, name: str) -> list[Any]:
        """ZooKeeper: entry node paths; etcd: the entries' key-values; Redis and the SQL
        stores: the harness's names of the live entries."""
        if self.kind in ("redis", *SQL_STORES):
            return self.service.entries(name)
        if self.kind == "zookeeper":
            path = f"{self.namespace}/semaphore_recipes/{name}"
            if self.admin.exists(path) is None:
                return []
            return [f"{path}/{c}" for c in sorted(self.admin.get_children(path))]
        from semaphore_recipes.etcd.ops import prefix_range_end

        prefix = f"{self.namespace}/{name}/entries/".encode()
        return list(self.admin.range(prefix, prefix_range_end(prefix)).kvs)

    def revoke(self, name: str) -> None:
        """Take the only permit of ``name`` away from outside: ZooKeeper deletes the
        entry node, etcd revokes the holder's lease, Redis and the SQL stores remove the
        entry as an operator's tool would (its client is told)."""
        entries = self.entries(name)
        assert len(entries) == 1, entries
        if self.kind in ("redis", *SQL_STORES):
            self.service.delete_entry(entries[0])
        elif self.kind == "zookeeper":
            self.admin.delete(entries[0])
        else:
            self.admin.lease_revoke(entries[0].lease)


@pytest.fixture
def store(service: Harness, request: pytest.FixtureRequest, sr_namespace: str) -> Store:
    if service.kind == "memory":
        pytest.skip("the command line runs in a process of its own: a memory store is not shared")
    admin_fixture = f"{service.kind}_admin"
    return Store(service, request.getfixturevalue(admin_fixture), sr_namespace)


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
