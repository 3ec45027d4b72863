"""What every launched server gets from
``semaphore_recipes.devtools.processes.ManagedProcess``, checked on both launchers with
real servers: no process or temporary directory outlives the Python process that started
it, a taken port is replaced or reported, and a development server comes with its URL and
description."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from semaphore_recipes.devtools.etcd_server import EtcdServer
from semaphore_recipes.devtools.launchers import dev_server_launcher, dev_server_schemes
from semaphore_recipes.devtools.processes import ManagedProcess, ServerStartError
from semaphore_recipes.devtools.zookeeper_server import ZooKeeperServer

ROOT = Path(__file__).resolve().parents[2]

#: backend -> code that makes an unstarted server ``s`` with a temporary workdir
MAKE_SERVER = {
    "etcd": "from semaphore_recipes.devtools.etcd_server import EtcdServer\ns = EtcdServer()\n",
    "zookeeper": (
        "from semaphore_recipes.devtools.zookeeper_server import ZooKeeperServer\n"
        "s = ZooKeeperServer()\n"
    ),
}
BACKENDS = sorted(MAKE_SERVER)


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie has exited: only its parent has not reaped it yet
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _wait_gone(pid: int, bound: float = 30.0) -> bool:
    deadline = time.monotonic() + bound
    while not _process_gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@contextmanager
def _python_holding_a_server(
    backend: str, then: str
) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """A Python process that starts a server, prints its pid and workdir, then runs
    ``then``; yields (that process, server pid, workdir)."""
    code = MAKE_SERVER[backend] + "s.start(60)\n" + "print(s.pid, s.workdir, flush=True)\n" + then
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    server_pid = 0
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        pid_text, workdir = line.split(maxsplit=1)
        server_pid = int(pid_text)
        yield proc, server_pid, Path(workdir.strip())
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if server_pid and not _process_gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)  # do not leave it to the next test


@pytest.mark.parametrize("backend", BACKENDS)
def test_server_dies_with_a_killed_parent(backend: str) -> None:
    # SIGKILL runs no atexit handler: only the parent-death signal can stop the server.
    with _python_holding_a_server(backend, "import sys; sys.stdin.read()\n") as (
        proc,
        server_pid,
        _workdir,
    ):
        assert not _process_gone(server_pid)
        proc.kill()
        proc.wait()
        assert _wait_gone(server_pid), f"{backend} pid {server_pid} outlived its parent"


@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_without_close_kills_the_server_and_removes_its_directory(backend: str) -> None:
    with _python_holding_a_server(backend, "import sys; sys.stdin.read()\n") as (
        proc,
        server_pid,
        workdir,
    ):
        assert workdir.is_dir()
        assert proc.stdin is not None
        proc.stdin.close()  # the script ends normally, never having called close()
        assert proc.wait(60) == 0
        assert _wait_gone(server_pid, bound=5.0), f"{backend} pid {server_pid} left running"
        assert not workdir.exists(), f"{workdir} left behind"


def _new_server(backend: str, **kwargs: int) -> ManagedProcess:
    if backend == "etcd":
        return EtcdServer(client_port=kwargs.get("port"))
    return ZooKeeperServer(port=kwargs.get("port"))


def _client_port(server: ManagedProcess) -> int:
    return server.bound_ports()[0]


@contextmanager
def _listening(port: int) -> Iterator[None]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_chosen_port_taken_meanwhile_is_replaced(backend: str) -> None:
    server = _new_server(backend)
    taken = _client_port(server)
    try:
        with _listening(taken):  # another process got there between choice and start
            server.start(60)
            assert _client_port(server) != taken
            assert server.probe_ready() is not None
    finally:
        server.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_given_port_that_is_taken_is_an_error_quoting_the_log(backend: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
        server = _new_server(backend, port=port)
        workdir = server.workdir
        with pytest.raises(ServerStartError, match=r"(?i)address already in use"):
            server.start_or_close(60)
    assert not server.running
    assert not workdir.exists()


@pytest.mark.parametrize("scheme", sorted(dev_server_schemes()))
def test_dev_server_gives_url_description_and_removes_its_data(scheme: str) -> None:
    dev = dev_server_launcher(scheme)(None)
    try:
        assert dev.running
        assert dev.url.startswith(f"{scheme}://127.0.0.1:")
        assert dev.description.lower().startswith(scheme)
        assert dev.url.rpartition("//")[2] in dev.description
        assert dev.data_dir.is_dir()
        host, port = dev.url.rpartition("//")[2].split(":")
        socket.create_connection((host, int(port)), timeout=5).close()
        assert f"starting {dev.description.split()[0]}" in dev.log_tail(100_000)
    finally:
        dev.close()
    assert not dev.running
    assert not dev.data_dir.exists()
    dev.close()  # idempotent


def test_dev_server_launcher_refuses_an_unknown_scheme() -> None:
    with pytest.raises(ValueError, match="known: etcd, zookeeper"):
        dev_server_launcher("redis")
