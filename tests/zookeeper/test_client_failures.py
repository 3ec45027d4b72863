"""ZooKeeper URL parameters checked before any I/O, a bounded connect to something that
is not ZooKeeper, a kazoo client whose connection loop died, and an interrupt that kazoo
swallowed."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.exceptions import ConnectionClosedError
from kazoo.handlers.utils import AsyncResult
from kazoo.protocol.states import KazooState, KeeperState

import semaphore_recipes as sr
from semaphore_recipes.testing.proxy import FaultProxy
from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness
from semaphore_recipes.testing.zookeeper_server import ZooKeeperServer
from semaphore_recipes.zookeeper import _kazoo_compat
from semaphore_recipes.zookeeper._waits import Answering
from semaphore_recipes.zookeeper.backend import (
    ZooKeeperBackend,
    _Opening,
    _Reconnected,
    _Started,
)

from ..conftest import wait_until

MARGIN = 3.0  # a loaded machine may start things late


@pytest.mark.parametrize(
    "param",
    [
        "session_timeout=1e9",  # kazoo packs it as a 32-bit number of milliseconds
        "session_timeout=0",
        "session_timeout=0.0001",
        "session_timeout=nan",
        "connect_timeout=0",
        "connect_timeout=-1",
        "connect_timeout=1e12",
        "connect_timeout=inf",
        "request_timeout=0",
        "request_timeout=x",
        "request_timeout=1e12",
        "sesion_timeout=4",  # misspelt: not understood
        "cert=client.crt",  # etcd's and Redis's name: "certfile, not cert"
    ],
)
def test_out_of_range_parameters_fail_before_any_io(param: str) -> None:
    # nothing listens on port 9: a connection attempt would be BackendUnavailable
    start = time.monotonic()
    with pytest.raises(ValueError, match=param.split("=")[0]):
        sr.connect(f"zookeeper://127.0.0.1:9/x?{param}")
    assert time.monotonic() - start < 1  # refused before any connection attempt


class _NotZooKeeper:
    """A TCP listener that is not ZooKeeper: it either says nothing, or answers with
    garbage and closes."""

    def __init__(self, reply: bytes | None) -> None:
        self.reply = reply
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply is not None:
                try:
                    conn.recv(4096)
                    conn.sendall(self.reply)
                finally:
                    conn.close()

    def close(self) -> None:
        self.listener.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture(params=["silent", "garbage", "etcd"])
def not_zookeeper(request: pytest.FixtureRequest) -> Iterator[str]:
    """The address of something that is not ZooKeeper."""
    if request.param == "etcd":
        yield request.getfixturevalue("etcd_server").endpoint
        return
    reply = None if request.param == "silent" else b"HTTP/1.1 400 Bad Request\r\n\r\n" * 4
    server = _NotZooKeeper(reply)
    yield server.address
    server.close()


def test_connect_timeout_holds_against_a_port_that_is_not_zookeeper(not_zookeeper: str) -> None:
    start = time.monotonic()
    with pytest.raises(sr.BackendUnavailable):
        sr.connect(f"zookeeper://{not_zookeeper}/x?connect_timeout=3&session_timeout=10")
    took = time.monotonic() - start
    assert took <= 3 + MARGIN, f"connect_timeout=3 took {took:.1f} s"


# kazoo's connection thread ends with the injected RuntimeError: that is the point
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_kazoo_connection_loop_fails_waiters_and_loses_permits(zk: ZooKeeperHarness) -> None:
    backend = zk.connect(session_timeout=4)
    other = zk.connect()
    busy = other.semaphore("busy", capacity=1).acquire()
    held = backend.semaphore("held", capacity=1).acquire()
    to_release = backend.semaphore("released", capacity=1).acquire()
    sem = backend.semaphore("busy", capacity=1)
    waiter_outcome: list[BaseException | sr.Permit] = []

    def wait() -> None:
        try:
            waiter_outcome.append(sem.acquire(timeout=60))
        except BaseException as exc:  # handed to the test
            waiter_outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    wait_until(lambda: len(other.semaphore("busy", capacity=1).status().waiters) == 1)

    _kazoo_compat.kill_connection_loop_at_next_reply(backend.client)
    to_release.release()  # its reply is the one that kills the loop: must not raise
    assert to_release.state is sr.PermitState.RELEASED

    waiter.join(10)
    assert not waiter.is_alive(), "the waiter still waits on a dead client"
    assert isinstance(waiter_outcome[0], sr.BackendUnavailable), waiter_outcome
    assert held.lost.wait(5), "a permit of the dead client was not set lost"
    assert held.state is sr.PermitState.LOST
    start = time.monotonic()
    with pytest.raises(sr.BackendUnavailable):
        backend.semaphore("held", capacity=1).acquire(timeout=30)
    with pytest.raises(sr.BackendUnavailable):
        sem.status()
    assert time.monotonic() - start < 1 + MARGIN  # at once, not after a timeout
    held.release()  # a no-op on a lost permit, and no error
    busy.release()
    # the server expires the dead client's session: its entries go
    wait_until(lambda: zk.entries() == [], timeout=4 + 10)


def test_an_interrupt_kazoo_swallowed_leaves_the_backend_working(
    zk: ZooKeeperHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """kazoo turns a KeyboardInterrupt that lands in its wake-up of the connection thread
    into ConnectionClosedError; the request stays queued. The acquire raises the
    interrupt; its entry is cleaned up and later requests are not held back."""
    backend = zk.connect()
    sem = backend.semaphore("interrupted", capacity=1)
    _kazoo_compat.interrupt_next_wakeup(backend.client)  # the enqueue's create
    with pytest.raises(KeyboardInterrupt):
        sem.acquire(timeout=30)
    wait_until(lambda: zk.entries() == [])  # the entry created after all is removed
    permit = sem.acquire(timeout=10)
    assert permit.state is sr.PermitState.HELD
    permit.release()
    assert sem.status().holders == ()
    backend.close()
    assert "did not acknowledge the close" not in caplog.text


@pytest.mark.parametrize("face", ["sync", "aio"])
def test_an_interrupt_kazoo_swallowed_is_raised_when_the_reply_replaced_its_error(
    zk: ZooKeeperHarness, monkeypatch: pytest.MonkeyPatch, face: str
) -> None:
    """kazoo sets ConnectionClosedError on the request whose wake-up it interrupted, but
    the request stays queued: once sent, its reply replaces that error. Here each reply
    is in before the runner reads it: the acquire raises the interrupt all the same, and
    the requests queued behind are not held back (the enqueue's listing, queued right
    after its create)."""
    sync_wait, async_wait = Answering.wait, Answering.wait_async

    def reply_first(request: object) -> None:
        if isinstance(request, AsyncResult):  # (a request kazoo never sends fails here)
            wait_until(lambda: request.ready() and not _closed_error(request.exception))

    def wait(answering: Answering, request: object) -> object:
        reply_first(request)
        return sync_wait(answering, request)

    async def wait_async(answering: Answering, request: object) -> object:
        reply_first(request)
        return await async_wait(answering, request)

    monkeypatch.setattr(Answering, "wait", wait)
    monkeypatch.setattr(Answering, "wait_async", wait_async)
    if face == "sync":
        backend = zk.connect()
        sem = backend.semaphore("interrupted-late", capacity=1)
        _kazoo_compat.interrupt_next_wakeup(backend.client)  # the enqueue's create
        with pytest.raises(KeyboardInterrupt):
            sem.acquire(timeout=10)
        wait_until(lambda: zk.entries() == [])  # the entry created after all is removed
        sem.acquire(timeout=10).release()
        backend.close()
    else:

        async def interrupted() -> None:
            async with sr.aio.connect(zk.url) as backend:
                sem = await backend.semaphore("interrupted-late", capacity=1).open()
                assert isinstance(backend.backend, ZooKeeperBackend)
                _kazoo_compat.interrupt_next_wakeup(backend.backend.client)
                with pytest.raises(KeyboardInterrupt):
                    await sem.acquire(timeout=10)
                wait_until(lambda: zk.entries() == [])
                await (await sem.acquire(timeout=10)).release()

        asyncio.run(interrupted())


def _closed_error(exc: object) -> bool:
    return isinstance(exc, ConnectionClosedError)


@pytest.mark.parametrize("face", ["sync", "aio"])
def test_a_connection_lost_while_connecting_is_ridden_out_within_the_connect_timeout(
    zookeeper_server: Any, sr_namespace: str, monkeypatch: pytest.MonkeyPatch, face: str
) -> None:
    """The member a new client reached goes away while the chroot is being made (a
    leader election, a restart): kazoo connects again and so does the connect, within
    its connect timeout, instead of failing at the first connection loss."""
    proxy = FaultProxy(zookeeper_server.host_port).start()
    seen: list[object] = []

    def break_the_first_request(request: object) -> None:
        seen.append(request)
        if sum(not isinstance(r, _Started) for r in seen) == 1:
            proxy.drop_replies()  # the request is sent, its reply lost: then a reset

            def reset() -> None:
                proxy.cut()
                proxy.restore()

            threading.Timer(0.3, reset).start()

    sync_wait, async_wait = _Opening.wait, _Opening.wait_async

    def wait(opening: _Opening, request: object) -> object:
        break_the_first_request(request)
        return sync_wait(opening, request)

    async def wait_async(opening: _Opening, request: object) -> object:
        break_the_first_request(request)
        return await async_wait(opening, request)

    monkeypatch.setattr(_Opening, "wait", wait)
    monkeypatch.setattr(_Opening, "wait_async", wait_async)
    url = f"zookeeper://{proxy.address}{sr_namespace}/made/at/connect?connect_timeout=20"
    try:
        if face == "sync":
            with sr.connect(url) as backend:
                backend.semaphore("ridden-out", capacity=1).acquire(timeout=10).release()
        else:

            async def main() -> None:
                async with sr.aio.connect(url) as backend:
                    sem = await backend.semaphore("ridden-out", capacity=1).open()
                    permit = await sem.acquire(timeout=10)
                    await permit.release()

            asyncio.run(main())
    finally:
        proxy.close()
    assert any(isinstance(r, _Reconnected) for r in seen), seen  # the loss was met


@pytest.fixture(scope="module")
def refusing_digest() -> Iterator[ZooKeeperServer]:
    """A server that answers any digest credentials with AUTH_FAILED."""
    config = {"DigestAuthenticationProvider.enabled": "false"}  # zookeeper.* property
    with ZooKeeperServer(extra_config=config) as server:
        yield server


@pytest.mark.parametrize("face", ["sync", "aio"])
@pytest.mark.parametrize("path", ["", "/chroot"])
@pytest.mark.parametrize("late", ["wait", "request"])
def test_credentials_refused_before_the_connect_looks_are_still_named(
    refusing_digest: ZooKeeperServer,
    monkeypatch: pytest.MonkeyPatch,
    face: str,
    path: str,
    late: str,
) -> None:
    """Kazoo reports CONNECTED, then sends the credentials; their refusal (AUTH_FAILED)
    is CLOSED soon after. A connect that looks only once kazoo has closed (its thread
    was slow: ``late`` says before which step) still fails with AuthenticationFailed,
    at once, not BackendUnavailable at its connect timeout."""
    sync_wait, async_wait = _Opening.wait, _Opening.wait_async
    new_client = _Opening.new_client
    lost = threading.Event()

    def recording_client(opening: _Opening) -> Any:
        client = new_client(opening)
        client.add_listener(lambda state: lost.set() if state == KazooState.LOST else None)
        return client

    def closed(opening: _Opening) -> bool:
        # (a client not started yet is CLOSED too: wait for the refusal's LOST first)
        assert lost.wait(10)
        wait_until(lambda: opening.client.client_state == KeeperState.CLOSED, timeout=10)
        return late == "request"  # as if the connection were seen before it closed

    def wait(opening: _Opening, request: object) -> object:
        if isinstance(request, _Started) and closed(opening):
            return None
        return sync_wait(opening, request)

    async def wait_async(opening: _Opening, request: object) -> object:
        if isinstance(request, _Started) and closed(opening):
            return None
        return await async_wait(opening, request)

    monkeypatch.setattr(_Opening, "new_client", recording_client)
    monkeypatch.setattr(_Opening, "wait", wait)
    monkeypatch.setattr(_Opening, "wait_async", wait_async)
    url = f"zookeeper://{refusing_digest.host_port}{path}?username=u&password=p&connect_timeout=30"

    async def connect_async() -> None:
        async with sr.aio.connect(url):
            pass

    start = time.monotonic()
    with pytest.raises(sr.AuthenticationFailed) as err:
        if face == "sync":
            sr.connect(url).close()
        else:
            asyncio.run(connect_async())
    assert time.monotonic() - start < 10 + MARGIN  # not the connect timeout
    assert err.value.user == "u"
    assert type(err.value.__cause__).__name__ == "AuthFailedError"
