"""Tests for semaphore_recipes.devtools.zookeeper_server (and the testing module's
expire_session) against real ZooKeeper JVMs."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from semaphore_recipes.devtools.programs import PROGRAMS
from semaphore_recipes.devtools.zookeeper_server import (
    ZooKeeperEnsemble,
    ZooKeeperNotFound,
    ZooKeeperServer,
    find_zookeeper_classpath,
)
from semaphore_recipes.testing.zookeeper_server import expire_session

kazoo_client = pytest.importorskip("kazoo.client")
from kazoo.protocol.states import KazooState  # noqa: E402

try:
    find_zookeeper_classpath()
except ZooKeeperNotFound as exc:  # pragma: no cover - depends on the machine
    pytest.skip(str(exc), allow_module_level=True)

FAST_RETRY = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_jitter": 0.1, "max_delay": 0.25}


class StateLog:
    """Records kazoo connection states and lets tests wait for one."""

    def __init__(self) -> None:
        self.states: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, state: Any) -> None:
        with self._cond:
            self.states.append(state)
            self._cond.notify_all()

    def wait_for(self, state: Any, timeout: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: state in self.states, timeout):
                raise AssertionError(f"no {state} within {timeout}s; saw {self.states}")


@contextmanager
def kazoo(hosts: str, session_timeout: float = 2.0) -> Iterator[Any]:
    client = kazoo_client.KazooClient(
        hosts=hosts, timeout=session_timeout, connection_retry=FAST_RETRY
    )
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def wait_until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture(scope="module")
def ensemble() -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(3) as ens:
        yield ens


# ---------------------------------------------------------------- discovery


def test_classpath_names_the_debian_jar() -> None:
    assert "zookeeper.jar" in find_zookeeper_classpath()


def test_classpath_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOOKEEPER_CLASSPATH", "/opt/zk/lib/*")
    assert find_zookeeper_classpath() == "/opt/zk/lib/*"


def test_a_tls_classpath_adds_the_netty_jars_the_debian_manifest_misses() -> None:
    # without them the server closes every TLS connection (tests/zookeeper/test_tls.py)
    plain, tls = find_zookeeper_classpath(), find_zookeeper_classpath(tls=True)
    assert "netty-codec.jar" not in plain
    assert "netty-codec.jar" in tls and "netty-resolver.jar" in tls


def test_tls_is_for_a_standalone_server() -> None:
    with pytest.raises(ValueError, match="standalone"):
        ZooKeeperServer(myid=1, quorum={1: (1, 2)}, tls=("c", "k", "ca"))


def test_not_found_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZOOKEEPER_CLASSPATH", raising=False)
    no_jar = dataclasses.replace(
        PROGRAMS["zookeeper.jar"], fallbacks=("/nonexistent/zookeeper.jar",)
    )
    monkeypatch.setitem(PROGRAMS, "zookeeper.jar", no_jar)
    with pytest.raises(ZooKeeperNotFound, match=r"apt-get install -y zookeeper"):
        find_zookeeper_classpath()


def test_missing_java_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ZooKeeperNotFound, match="java"):
        find_zookeeper_classpath()


def test_module_imports_without_kazoo() -> None:
    code = (
        "import sys; sys.modules['kazoo'] = None\n"
        "import semaphore_recipes.devtools.zookeeper_server as m\n"
        "import semaphore_recipes.testing.zookeeper_server\n"
        "import semaphore_recipes.testing.proxy\n"
        "s = m.ZooKeeperServer(); print(s.host_port); s.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    assert out.stdout.startswith("127.0.0.1:")


# ---------------------------------------------------------------- standalone


def test_standalone_lifecycle_with_kazoo() -> None:
    server = ZooKeeperServer(tick_time_ms=200, min_session_timeout_ms=1000)
    workdir = server.workdir
    try:
        assert not server.running
        server.start()
        assert server.running
        assert server.host_port == f"127.0.0.1:{server.port}"
        assert server.mode() == "standalone"
        config = server.config_path.read_text()
        for line in (
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "clientPortAddress=127.0.0.1",
            "preAllocSize=8192",
            "forceSync=no",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
        ):
            assert line in config.splitlines()
        with kazoo(server.host_port) as client:
            client.create("/persisted", b"v1")
            assert client.get("/persisted")[0] == b"v1"

        server.stop()
        assert not server.running
        with pytest.raises(OSError):
            server.four_letter("ruok", timeout=1.0)

        server.restart()  # same port, same data
        with kazoo(server.host_port) as client:
            assert client.get("/persisted")[0] == b"v1"

        server.kill()
        assert not server.running
        server.start()
        assert server.mode() == "standalone"
        log = server.log_tail(100_000)
        assert log.count(f"starting ZooKeeper on {server.host_port}") == 3
        assert "org.apache.zookeeper" in log
    finally:
        server.close()
    assert not workdir.exists()
    assert not server.running


def test_four_letter_words(zk: ZooKeeperServer) -> None:
    assert zk.four_letter("ruok") == "imok"
    assert "Mode: standalone" in zk.four_letter("srvr")
    assert zk.mode() == "standalone"


def test_mntr_parses_numbers(zk: ZooKeeperServer) -> None:
    before = zk.mntr()
    received = before["zk_packets_received"]
    assert isinstance(received, int)
    assert isinstance(before["zk_version"], str)
    assert before["zk_server_state"] == "standalone"
    assert any(isinstance(v, float) for v in before.values())
    with kazoo(zk.host_port) as client:
        for i in range(5):
            client.exists(f"/nothing-{i}")
    after = zk.mntr()["zk_packets_received"]
    assert isinstance(after, int)
    assert after >= received + 5


def test_pause_and_resume(zk: ZooKeeperServer) -> None:
    zk.pause()
    try:
        assert zk.running and zk.paused
        with pytest.raises(OSError):
            zk.four_letter("srvr", timeout=0.3)
    finally:
        zk.resume()
    assert not zk.paused
    assert zk.mode() == "standalone"


def test_start_failure_raises_with_log_tail(tmp_path: Path) -> None:
    server = ZooKeeperServer(workdir=tmp_path, classpath=str(tmp_path / "missing.jar"))
    with pytest.raises(RuntimeError, match="QuorumPeerMain"):
        server.start(timeout=20)
    assert not server.running
    server.close()
    assert tmp_path.exists()  # not ours to remove


def test_expire_session_standalone(zk: ZooKeeperServer) -> None:
    path = f"/eph-{uuid.uuid4().hex}"
    states = StateLog()
    with kazoo(zk.host_port) as victim, kazoo(zk.host_port) as observer:
        victim.add_listener(states)
        victim.create(path, ephemeral=True)
        old_session = victim.client_id[0]
        assert observer.exists(path) is not None

        expire_session(victim)

        assert KazooState.LOST in states.states
        assert observer.exists(path) is None
        # kazoo then starts over with a brand-new session.
        wait_until(lambda: victim.connected)
        assert victim.client_id[0] != old_session


def test_expire_session_times_out_when_nothing_happens(zk: ZooKeeperServer) -> None:
    with kazoo(zk.host_port) as victim:
        # Point the twin at a port where nothing listens: the session survives.
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(TimeoutError):
            expire_session(victim, timeout=0.5, hosts=dead)
        assert victim.connected


# ---------------------------------------------------------------- ensemble


def test_ensemble_basics(ensemble: ZooKeeperEnsemble) -> None:
    assert len(ensemble.servers) == 3
    assert ensemble.connect_string == ",".join(f"127.0.0.1:{s.port}" for s in ensemble.servers)
    modes = sorted(s.mode() for s in ensemble.servers)
    assert modes == ["follower", "follower", "leader"]
    leader = ensemble.leader()
    assert leader.mode() == "leader"
    assert sorted(s.port for s in ensemble.followers()) == sorted(
        s.port for s in ensemble.servers if s is not leader
    )
    tail = ensemble.log_tail(5)
    for server in ensemble.servers:
        assert f"zk{server.myid} {server.host_port}" in tail


def test_ensemble_leader_failover_and_rejoin(ensemble: ZooKeeperEnsemble) -> None:
    base = f"/failover-{uuid.uuid4().hex}"
    with kazoo(ensemble.connect_string, session_timeout=4.0) as client:
        client.create(base)
        client.create(f"{base}/before")
        old_leader = ensemble.leader()

        old_leader.kill()
        ensemble.wait_for_quorum(timeout=30)
        new_leader = ensemble.leader()
        assert new_leader is not old_leader
        assert len(ensemble.followers()) == 1

        # The client (all three hosts) keeps working, with retries for the blip.
        client.retry(client.create, f"{base}/during")
        assert sorted(client.retry(client.get_children, base)) == ["before", "during"]

        old_leader.start(timeout=30)
        ensemble.wait_for_quorum(timeout=30)
        assert old_leader.mode() == "follower"
        assert ensemble.leader() is new_leader
        assert len(ensemble.followers()) == 2

    # The rejoined member has caught up on the write it missed.
    with kazoo(old_leader.host_port) as direct:
        direct.sync(base)
        assert sorted(direct.get_children(base)) == ["before", "during"]


def test_ensemble_member_restart(ensemble: ZooKeeperEnsemble) -> None:
    follower = ensemble.followers()[0]
    follower.restart(timeout=30)
    ensemble.wait_for_quorum(timeout=30)
    assert follower.mode() == "follower"
    with kazoo(ensemble.connect_string) as client:
        client.ensure_path("/restart-check")


def test_expire_session_ensemble(ensemble: ZooKeeperEnsemble) -> None:
    path = f"/eph-{uuid.uuid4().hex}"
    states = StateLog()
    with kazoo(ensemble.connect_string) as victim, kazoo(ensemble.connect_string) as observer:
        victim.add_listener(states)
        victim.create(path, ephemeral=True)
        expire_session(victim)
        assert KazooState.LOST in states.states
        observer.sync(path)
        assert observer.exists(path) is None
