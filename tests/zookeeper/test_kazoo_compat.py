"""What the ZooKeeper backend relies on of kazoo beyond its public API, pinned against the
installed kazoo and a real ZooKeeper (``scripts/kazoo-versions`` runs this file with the
oldest and the newest kazoo the project supports).

Each test fails if kazoo renamed or changed what ``zookeeper/_kazoo_compat.py`` reads: the
readers that tolerate a missing attribute (``getattr`` with a default) then answer None
or False, which the positive checks here reject. The first two tests keep every such
read in that one module.
"""

from __future__ import annotations

import ast
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionDropped, ConnectionLoss
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from semaphore_recipes.devtools.processes import free_port
from semaphore_recipes.testing.proxy import FaultProxy
from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness
from semaphore_recipes.zookeeper import _kazoo_compat as compat

from ..conftest import wait_until

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("semaphore_recipes", "tests", "benchmarks", "chaos", "examples")
COMPAT = REPO / "semaphore_recipes" / "zookeeper" / "_kazoo_compat.py"


# ---- kazoo's private names are named in the compat module only ---------------------
def _own_names(tree: ast.AST) -> set[str]:
    """Names a file defines for its own objects (``def _call``, ``self._stopped = ...``):
    the etcd driver and the fault proxy have a ``_call`` of their own."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own.add(node.name)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                ):
                    own.add(sub.attr)
    return own


def _named(tree: ast.AST, names: set[str]) -> Iterator[tuple[int, str]]:
    """Attribute accesses ``x.<name>`` and string constants ``"<name>"`` (getattr)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            yield node.lineno, node.attr
        elif isinstance(node, ast.Constant) and node.value in names:
            yield node.lineno, str(node.value)


def test_no_file_but_the_compat_module_names_a_kazoo_private_attribute() -> None:
    private = set(compat.PRIVATE_NAMES)
    found = []
    scanned = 0
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            if path == COMPAT or "_proto" in path.parts:
                continue
            scanned += 1
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            names = private - _own_names(tree)
            for line, name in _named(tree, names):
                found.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert scanned > 50, f"the scan found only {scanned} files under {REPO}"
    assert not found, "kazoo internals named outside zookeeper/_kazoo_compat.py:\n" + "\n".join(
        found
    )


def test_the_compat_module_lists_every_kazoo_private_name_it_uses() -> None:
    source = COMPAT.read_text(encoding="utf-8")
    tree = ast.parse(source)
    module_level = {
        node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    }
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base_is_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if node.attr.startswith("_") and not node.attr.startswith("__") and not base_is_self:
                used.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.update(re.findall(r"^_[a-z_]+$", node.value))
    # our own markers on our wrappers
    used -= module_level | {"_records_negotiated_timeout", "_notes_swallowed_interrupts"}
    assert used, "the scan of the compat module found nothing: is it still the one?"
    assert used <= set(compat.PRIVATE_NAMES), used - set(compat.PRIVATE_NAMES)


# ---- helpers -------------------------------------------------------------------------
class _States:
    """The kazoo states a client went through, waited for in order."""

    def __init__(self, client: KazooClient) -> None:
        self.seen: list[Any] = []
        self.changed = threading.Condition()
        client.add_listener(self._listener)

    def _listener(self, state: Any) -> None:
        with self.changed:
            self.seen.append(state)
            self.changed.notify_all()

    def wait_for(self, state: Any, timeout: float = 15.0) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: state in self.seen, timeout):
                raise AssertionError(f"no {state} within {timeout} s; saw {self.seen}")
            del self.seen[: self.seen.index(state) + 1]


def _server_sessions(server: Any) -> dict[int, int]:
    """The server's view: session id -> negotiated timeout (ms), from ``cons``."""
    found = {}
    for line in server.four_letter("cons").splitlines():
        sid = re.search(r"sid=0x([0-9a-f]+)", line)
        timeout = re.search(r"[(,]to=(\d+)", line)
        if sid and timeout:
            found[int(sid.group(1), 16)] = int(timeout.group(1))
    return found


@pytest.fixture
def proxy(zookeeper_server: Any) -> Iterator[FaultProxy]:
    with FaultProxy(zookeeper_server.host_port) as started:
        yield started


@pytest.fixture
def clients() -> Iterator[list[KazooClient]]:
    made: list[KazooClient] = []
    yield made
    for client in made:
        client.stop()
        client.close()


def _started(clients: list[KazooClient], hosts: str, timeout: float = 10.0) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=timeout)
    compat.track_negotiated_session_timeout(client)
    clients.append(client)
    client.start(timeout=15)
    return client


# ---- the session -----------------------------------------------------------------------
def test_session_id_is_the_servers_and_is_kept_while_suspended(
    zookeeper_server: Any, proxy: FaultProxy, clients: list[KazooClient]
) -> None:
    client = _started(clients, proxy.address)
    states = _States(client)
    sid = compat.session_id(client)
    assert sid is not None
    assert client.client_id is not None and sid == client.client_id[0]
    assert sid in _server_sessions(zookeeper_server)

    proxy.cut()
    states.wait_for(KazooState.SUSPENDED)
    assert client.client_id is None  # why kazoo's public id is not enough
    assert compat.session_id(client) == sid
    proxy.restore()
    states.wait_for(KazooState.CONNECTED)
    assert compat.session_id(client) == sid  # the same session came back

    client.stop()
    assert compat.session_id(client) is None


def test_session_password_lets_a_second_client_attach_to_the_session(
    zookeeper_server: Any, clients: list[KazooClient]
) -> None:
    client = _started(clients, zookeeper_server.host_port)
    states = _States(client)
    sid = compat.session_id(client)
    password = compat.session_password(client)
    assert sid is not None and len(password) == 16 and password != bytes(16)

    twin = KazooClient(hosts=zookeeper_server.host_port, client_id=(sid, password))
    clients.append(twin)
    twin.start(timeout=15)
    assert twin.client_id is not None and twin.client_id[0] == sid
    twin.stop()  # closes the session the two share
    states.wait_for(KazooState.LOST)


def test_session_timeout_is_the_negotiated_one(
    zookeeper_server: Any, clients: list[KazooClient]
) -> None:
    # the test server's maxSessionTimeout is 60 s: it lowers a request of 100 s
    client = _started(clients, zookeeper_server.host_port, timeout=100)
    sid = compat.session_id(client)
    assert sid is not None
    negotiated_ms = _server_sessions(zookeeper_server)[sid]
    assert negotiated_ms < 100_000
    assert compat.session_timeout(client) == negotiated_ms / 1000

    within_range = _started(clients, zookeeper_server.host_port, timeout=4)
    assert compat.session_timeout(within_range) == 4.0


def test_session_timeout_before_a_connection_seen_is_the_one_asked_for(
    zookeeper_server: Any, clients: list[KazooClient]
) -> None:
    client = KazooClient(hosts=zookeeper_server.host_port, timeout=100)
    clients.append(client)
    client.start(timeout=15)
    compat.track_negotiated_session_timeout(client)  # too late for this connection
    assert compat.session_timeout(client) == 100.0


def test_the_backend_reports_the_negotiated_session_timeout(
    zk: ZooKeeperHarness, zookeeper_server: Any
) -> None:
    backend = zk.connect(session_timeout=100)  # more than the test server's maximum
    assert backend.session_id is not None
    negotiated_ms = _server_sessions(zookeeper_server)[backend.session_id]
    assert negotiated_ms < 100_000
    assert backend.session_timeout == negotiated_ms / 1000


def test_last_connect_failure_is_why_attempts_failed_until_one_succeeds(
    proxy: FaultProxy, clients: list[KazooClient]
) -> None:
    retry_forever = {"max_tries": -1, "delay": 0.05, "max_delay": 0.2}
    client = KazooClient(hosts=proxy.address, timeout=4, connection_retry=retry_forever)
    compat.track_negotiated_session_timeout(client)
    clients.append(client)
    assert compat.last_connect_failure(client) is None
    proxy.cut()  # every connection closed at once: kazoo retries, keeping no error
    client.start_async()
    wait_until(lambda: compat.last_connect_failure(client) is not None)
    # the socket error kazoo wrapped in ConnectionDropped (a reset), or its own (a close)
    assert isinstance(compat.last_connect_failure(client), (OSError, ConnectionDropped))
    proxy.restore()
    wait_until(lambda: client.connected)
    assert compat.last_connect_failure(client) is None
    # the TLS case (an ssl.SSLError under kazoo's ConnectionDropped): tests/zookeeper/test_tls.py


# ---- watches and kazoo's threads --------------------------------------------------
def test_a_data_watch_is_registered_under_its_full_path_until_it_fires(
    zookeeper_server: Any, proxy: FaultProxy, clients: list[KazooClient], sr_namespace: str
) -> None:
    admin = _started(clients, zookeeper_server.host_port)
    admin.ensure_path(f"{sr_namespace}/node")
    client = _started(clients, f"{proxy.address}{sr_namespace}")
    states = _States(client)
    events: list[WatchedEvent] = []
    fired = threading.Event()

    def watcher(event: WatchedEvent) -> None:
        events.append(event)
        fired.set()

    full_path = f"{sr_namespace}/node"
    assert not compat.data_watch_registered(client, full_path, watcher)
    client.get_async("/node", watch=watcher).get(timeout=10)
    assert compat.data_watch_registered(client, full_path, watcher)
    assert not compat.data_watch_registered(client, "/node", watcher)  # chroot included
    assert not compat.data_watch_registered(client, full_path, lambda event: None)

    admin.set(full_path, b"changed")
    assert fired.wait(10)
    assert events[0].type == EventType.CHANGED
    assert not compat.data_watch_registered(client, full_path, watcher)

    # kazoo drops its watchers on a lost connection (firing them with a NONE event) and
    # does not set them again when the session comes back
    fired.clear()
    client.get_async("/node", watch=watcher).get(timeout=10)
    assert compat.data_watch_registered(client, full_path, watcher)
    proxy.cut()
    states.wait_for(KazooState.SUSPENDED)
    assert fired.wait(10)
    assert events[-1].type == EventType.NONE
    assert not compat.data_watch_registered(client, full_path, watcher)
    proxy.restore()
    states.wait_for(KazooState.CONNECTED)
    assert not compat.data_watch_registered(client, full_path, watcher)


def test_run_on_callback_thread_runs_in_order_with_kazoos_watch_callbacks(
    zookeeper_server: Any, clients: list[KazooClient], sr_namespace: str
) -> None:
    client = _started(clients, zookeeper_server.host_port)
    client.ensure_path(f"{sr_namespace}/node")
    ran: list[tuple[str, int]] = []
    done = threading.Event()
    block = threading.Event()

    def watcher(event: WatchedEvent) -> None:
        block.wait(10)  # the callback thread is busy with this watch callback...
        ran.append(("watch", threading.get_ident()))

    client.get(f"{sr_namespace}/node", watch=watcher)
    client.set(f"{sr_namespace}/node", b"changed")
    wait_until(lambda: not compat.data_watch_registered(client, f"{sr_namespace}/node", watcher))
    compat.run_on_callback_thread(client, lambda: ran.append(("first", threading.get_ident())))

    def second() -> None:
        ran.append(("second", 0))
        done.set()

    compat.run_on_callback_thread(client, second)
    assert ran == []  # ...so neither function has run: queued behind it, returned at once
    block.set()
    assert done.wait(10)
    assert [what for what, _ in ran] == ["watch", "first", "second"]
    assert ran[0][1] == ran[1][1] != threading.get_ident()


# ---- kazoo's bare except in _call -------------------------------------------------
def test_a_keyboard_interrupt_kazoo_swallowed_is_told_from_a_closed_client(
    zookeeper_server: Any, clients: list[KazooClient], sr_namespace: str
) -> None:
    client = _started(clients, zookeeper_server.host_port)
    client.ensure_path(sr_namespace)
    compat.interrupt_next_wakeup(client)
    with pytest.raises(ConnectionClosedError) as interrupted:
        client.create_async(f"{sr_namespace}/queued").get(timeout=10)
    assert client.connected
    assert compat.interrupted_request(interrupted.value, client)
    # the request is still queued: the wake-up it missed sends it, and the client goes on
    compat.wake_connection_thread(client)
    assert client.exists_async(f"{sr_namespace}/queued").get(timeout=10) is not None

    assert not compat.interrupted_request(ConnectionLoss(), client)
    client.stop()
    with pytest.raises(ConnectionClosedError) as closed:
        client.exists_async("/").get(timeout=10)
    assert not compat.interrupted_request(closed.value, client)


def test_a_keyboard_interrupt_kazoo_swallowed_is_noted_and_nothing_lags(
    zookeeper_server: Any, clients: list[KazooClient], sr_namespace: str
) -> None:
    client = _started(clients, zookeeper_server.host_port)
    client.ensure_path(sr_namespace)
    compat.note_swallowed_interrupts(client)
    compat.note_swallowed_interrupts(client)  # a second call does nothing
    assert not compat.take_swallowed_interrupt(client)
    compat.interrupt_next_wakeup(client)
    queued = client.create_async(f"{sr_namespace}/queued")
    assert compat.take_swallowed_interrupt(client)
    assert not compat.take_swallowed_interrupt(client)  # told once
    # woken again when the interrupt was noted: sent with no other request behind it,
    # and its reply replaces kazoo's ConnectionClosedError
    wait_until(queued.successful)
    assert client.exists_async(f"{sr_namespace}/queued").get(timeout=10) is not None
    # noted for the thread it was swallowed on only
    compat.interrupt_next_wakeup(client)
    client.create_async(f"{sr_namespace}/queued-too")
    seen_elsewhere: list[bool] = []
    elsewhere = threading.Thread(
        target=lambda: seen_elsewhere.append(compat.take_swallowed_interrupt(client))
    )
    elsewhere.start()
    elsewhere.join(10)
    assert seen_elsewhere == [False]
    assert compat.take_swallowed_interrupt(client)
    # still in place after a restart (kazoo makes a new wake-up socket pair)
    client.stop()
    client.close()
    client.start(timeout=15)
    compat.interrupt_next_wakeup(client)
    again = client.create_async(f"{sr_namespace}/after-restart")
    assert compat.take_swallowed_interrupt(client)
    wait_until(again.successful)
    # a request kazoo fails at once while the caller handles an interrupt of its own (a
    # cleanup after Ctrl-C) swallowed nothing
    client.stop()
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        closed = client.exists_async("/")
    assert not compat.take_swallowed_interrupt(client)
    with pytest.raises(ConnectionClosedError):
        closed.get(timeout=10)


# ---- kazoo's connection loop ------------------------------------------------------
# kazoo's connection thread ends with the injected RuntimeError: that is the point
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_connection_loop_is_told_from_a_stopped_client(
    zookeeper_server: Any, clients: list[KazooClient]
) -> None:
    client = _started(clients, zookeeper_server.host_port)
    states = _States(client)
    assert not compat.connection_loop_died(client)
    compat.kill_connection_loop_at_next_reply(client)
    with pytest.raises(RuntimeError):
        client.exists_async("/").get(timeout=10)
    states.wait_for(KazooState.LOST)
    wait_until(lambda: compat.connection_loop_died(client))
    with pytest.raises(ConnectionClosedError):
        client.exists_async("/").get(timeout=10)

    stopped = _started(clients, zookeeper_server.host_port)
    stopped.stop()
    assert not compat.connection_loop_died(stopped)


def test_drop_connection_breaks_the_live_connection(
    zookeeper_server: Any, clients: list[KazooClient]
) -> None:
    client = _started(clients, zookeeper_server.host_port)
    states = _States(client)
    sid = compat.session_id(client)
    compat.drop_connection(client)
    states.wait_for(KazooState.SUSPENDED)
    states.wait_for(KazooState.CONNECTED)  # kazoo reconnects: only stop() gives up
    assert compat.session_id(client) == sid

    idle = KazooClient(hosts=zookeeper_server.host_port)
    compat.drop_connection(idle)  # never started: nothing to drop, and no error


# ---- connection attempts ----------------------------------------------------------------
def test_a_refused_attempt_is_reported_with_its_address(clients: list[KazooClient]) -> None:
    port = free_port()  # nothing listens there
    client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10)
    clients.append(client)
    failures: list[tuple[str, int, OSError]] = []
    compat.on_connection_failed(client, lambda ip, p, error: failures.append((ip, p, error)))
    client.start_async()
    wait_until(lambda: bool(failures))
    ip, reported_port, error = failures[0]
    assert (ip, reported_port) == ("127.0.0.1", port)
    assert isinstance(error, ConnectionRefusedError)


def test_a_server_closing_at_the_handshake_is_reported(clients: list[KazooClient]) -> None:
    """A listener that reads the session request and closes, as ZooKeeper does to a
    client that has seen a newer zxid than its own."""
    listener = socket.create_server(("127.0.0.1", 0))
    closes: list[bool] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)

    threading.Thread(target=serve, daemon=True).start()
    client = KazooClient(hosts=f"127.0.0.1:{listener.getsockname()[1]}", timeout=10)
    clients.append(client)
    compat.on_handshake_closed(client, lambda: closes.append(True))
    try:
        client.start_async()
        wait_until(lambda: bool(closes))
    finally:
        listener.close()


def test_last_zxid_is_the_newest_seen(
    zookeeper_server: Any, clients: list[KazooClient], sr_namespace: str
) -> None:
    client = _started(clients, zookeeper_server.host_port)
    before = compat.last_zxid(client)
    client.ensure_path(f"{sr_namespace}/zxid")
    assert compat.last_zxid(client) > max(before, 0)
