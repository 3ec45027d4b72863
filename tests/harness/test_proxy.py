"""Tests for semaphore_recipes.testing.proxy.FaultProxy (raw TCP and kazoo)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from semaphore_recipes.testing.proxy import FaultProxy, ProxyMode

# Any exception escaping a proxy worker thread fails the test.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


# ---------------------------------------------------------------- raw TCP


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.received = bytearray()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), EchoHandler)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class EchoHandler(socketserver.BaseRequestHandler):
    server: EchoServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            while data := sock.recv(65536):
                with self.server.lock:
                    self.server.received += data
                sock.sendall(data)
        except OSError:
            pass


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(echo.address) as p:
        yield p


def connect(proxy: FaultProxy) -> socket.socket:
    host, port = proxy.address.split(":")
    sock = socket.create_connection((host, int(port)), timeout=2.0)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def is_closed(sock: socket.socket, timeout: float = 2.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def new_connection_is_closed(proxy: FaultProxy) -> bool:
    """Connect and report whether the proxy closed the connection at once.

    On loopback the proxy's reset can beat ``connect()`` returning, so a reset
    reported by ``connect()`` itself counts as closed too.
    """
    try:
        sock = connect(proxy)
    except ConnectionResetError:
        return True
    with sock:
        return is_closed(sock)


def test_forwards_both_ways(proxy: FaultProxy, echo: EchoServer) -> None:
    assert proxy.address.startswith("127.0.0.1:")
    with connect(proxy) as sock:
        payload = bytes(range(256)) * 4096  # 1 MiB, exercises buffering
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert recv_exactly(sock, len(payload)) == payload
        sender.join()
        assert proxy.connection_count == 1
    wait_until(lambda: proxy.connection_count == 0)


def test_half_close_is_passed_on(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"ping")
        sock.shutdown(socket.SHUT_WR)
        assert recv_exactly(sock, 4) == b"ping"
        assert is_closed(sock)
    wait_until(lambda: proxy.connection_count == 0)


def test_cut_closes_current_and_new_connections(proxy: FaultProxy) -> None:
    a, b = connect(proxy), connect(proxy)
    with a, b:
        a.sendall(b"x")
        assert recv_exactly(a, 1) == b"x"
        wait_until(lambda: proxy.connection_count == 2)
        proxy.cut()
        assert proxy.mode is ProxyMode.CUT
        assert proxy.connection_count == 0
        assert is_closed(a)
        assert is_closed(b)
    assert new_connection_is_closed(proxy)
    proxy.restore()
    with connect(proxy) as d:
        d.sendall(b"back")
        assert recv_exactly(d, 4) == b"back"


def test_blackhole_discards_both_ways_without_closing(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        proxy.blackhole()
        sock.sendall(b"lost")
        assert not is_closed(sock, timeout=0.3)  # nothing arrives, nothing closes
        assert bytes(echo.received) == b"a"
        assert proxy.connection_count == 1
        proxy.restore()
        sock.sendall(b"b")
        sock.settimeout(2.0)
        assert recv_exactly(sock, 1) == b"b"
        assert bytes(echo.received) == b"ab"


def test_drop_replies_forwards_requests_only(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        proxy.drop_replies()
        sock.sendall(b"request")
        wait_until(lambda: bytes(echo.received) == b"request")
        assert not is_closed(sock, timeout=0.3)  # the echo never comes back
        proxy.restore()
        sock.sendall(b"!")
        sock.settimeout(2.0)
        assert recv_exactly(sock, 1) == b"!"


def test_hold_delays_both_ways_and_loses_nothing(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        proxy.hold()
        assert proxy.mode is ProxyMode.HOLD
        sock.sendall(b"late")
        assert not is_closed(sock, timeout=0.3)  # nothing arrives, nothing closes
        assert bytes(echo.received) == b"a"
        proxy.restore()
        sock.settimeout(2.0)
        assert recv_exactly(sock, 4) == b"late"  # delivered, in order, after the hold
        assert bytes(echo.received) == b"alate"


def test_upstream_close_hidden_while_muted_then_closed_on_restore(echo: EchoServer) -> None:
    # Upstream that accepts and closes immediately.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    with listener, FaultProxy(f"127.0.0.1:{port}") as p:
        p.blackhole()
        with connect(p) as sock:
            conn, _ = listener.accept()
            conn.close()
            assert not is_closed(sock, timeout=0.3)  # the close is hidden
            p.restore()
            assert is_closed(sock)


def test_upstream_down_closes_client(echo: EchoServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with FaultProxy(dead) as p:
        assert new_connection_is_closed(p)
        wait_until(lambda: p.connection_count == 0)


def test_close_leaves_no_threads(echo: EchoServer) -> None:
    before = set(threading.enumerate())
    p = FaultProxy(echo.address)
    p.start()
    socks = [connect(p) for _ in range(5)]
    try:
        wait_until(lambda: p.connection_count == 5)
        p.close()
        p.close()  # idempotent
        for sock in socks:
            assert is_closed(sock)
    finally:
        for sock in socks:
            sock.close()
    leaked = [t for t in set(threading.enumerate()) - before if t.name.startswith("FaultProxy")]
    assert leaked == []
    with pytest.raises(RuntimeError):
        p.start()


def test_fault_methods_before_start() -> None:
    p = FaultProxy("127.0.0.1:1")
    p.cut()
    p.restore()
    with pytest.raises(RuntimeError):
        _ = p.address
    p.close()


def test_rejects_bad_upstream() -> None:
    with pytest.raises(ValueError):
        FaultProxy("no-port")


# ---------------------------------------------------------------- kazoo


kazoo_client = pytest.importorskip("kazoo.client")
from kazoo.exceptions import ConnectionLoss  # noqa: E402
from kazoo.protocol.states import KazooState  # noqa: E402

from semaphore_recipes.testing.zookeeper_server import (  # noqa: E402
    ZooKeeperNotFound,
    ZooKeeperServer,
    find_zookeeper_classpath,
)

FAST_RETRY = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_jitter": 0.1, "max_delay": 0.25}


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    try:
        find_zookeeper_classpath()
    except ZooKeeperNotFound as exc:  # pragma: no cover - depends on the machine
        pytest.skip(str(exc))
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def zk_proxy(zk: ZooKeeperServer) -> Iterator[FaultProxy]:
    with FaultProxy(zk.host_port) as p:
        yield p


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


class StateLog:
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


def test_kazoo_through_proxy(zk_proxy: FaultProxy) -> None:
    path = f"/via-proxy-{uuid.uuid4().hex}"
    with kazoo(zk_proxy.address) as client:
        client.create(path, b"hello")
        assert client.get(path)[0] == b"hello"
        assert zk_proxy.connection_count == 1
        assert zk_proxy.accepted_total == 1


def test_cut_suspends_and_restore_keeps_session(zk: ZooKeeperServer, zk_proxy: FaultProxy) -> None:
    path = f"/eph-{uuid.uuid4().hex}"
    states = StateLog()
    with kazoo(zk_proxy.address) as client, kazoo(zk.host_port) as observer:
        client.add_listener(states)
        client.create(path, ephemeral=True)
        session = client.client_id

        zk_proxy.cut()
        states.wait_for(KazooState.SUSPENDED, timeout=2.0)
        time.sleep(0.3)  # kazoo's reconnect attempts are being refused meanwhile
        assert not client.connected
        assert zk_proxy.accepted_total > 1

        zk_proxy.restore()
        states.wait_for(KazooState.CONNECTED, timeout=5.0)
        assert client.client_id == session
        assert KazooState.LOST not in states.states
        assert observer.exists(path) is not None
        assert client.exists(path) is not None


def test_lost_reply_then_cut(zk: ZooKeeperServer, zk_proxy: FaultProxy) -> None:
    path = f"/dropped-{uuid.uuid4().hex}"
    with kazoo(zk_proxy.address) as client, kazoo(zk.host_port) as observer:
        session = client.client_id
        zk_proxy.drop_replies()
        result = client.create_async(path, b"x")
        # The request reaches the server and is applied ...
        wait_until(lambda: observer.exists(path) is not None, timeout=2.0)
        # ... but the reply never arrives.
        assert not result.ready()

        zk_proxy.cut()
        with pytest.raises(ConnectionLoss):
            result.get(timeout=5.0)

        zk_proxy.restore()
        wait_until(lambda: client.connected, timeout=5.0)
        assert client.client_id == session
        assert client.exists(path) is not None
