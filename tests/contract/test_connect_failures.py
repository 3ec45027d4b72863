"""connect() to an address that refuses, or that is not the store: a clear error, soon.

Real servers: a port nothing listens on (refused), the plugin's ZooKeeper, etcd and
Redis servers and a plain HTTP server standing in for the wrong kind of store.
"""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio
from semaphore_recipes.devtools.processes import free_port

STORES = ["zookeeper", "etcd", "redis"]
NAMES = {"zookeeper": "ZooKeeper", "etcd": "etcd", "redis": "Redis"}
MARGIN = 3.0  # a loaded machine may start things late
# the connect timeout where a server of another kind answers: the diagnosis that names
# it runs once the timeout is over, on a budget of its own, so any timeout shows it
WRONG_KIND_TIMEOUT = 1


def _connect(face: str, url: str) -> None:
    """Connect with ``face`` and close again (the tests expect the connect to fail)."""
    if face == "sync":
        sr.connect(url).close()
        return

    async def main() -> None:
        backend = await aio.connect(url)
        await backend.close()

    asyncio.run(main())


def _failure(face: str, url: str) -> tuple[sr.BackendUnavailable, float]:
    start = time.monotonic()
    with pytest.raises(sr.BackendUnavailable) as caught:
        _connect(face, url)
    return caught.value, time.monotonic() - start


@pytest.fixture(params=["sync", "aio"])
def face(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def refused_port() -> int:
    """A port nothing listens on: a connection there is refused at once."""
    return free_port()


@pytest.fixture
def silent_address() -> Iterator[str]:
    """A listener that accepts connections and never says a word."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for conn in accepted:
        conn.close()


@pytest.fixture
def http_address() -> Iterator[str]:
    """A plain HTTP server: the wrong kind of server for every store."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("store", STORES)
def test_a_refused_connection_fails_at_once_naming_the_refusal(
    store: str, face: str, refused_port: int
) -> None:
    error, took = _failure(face, f"{store}://127.0.0.1:{refused_port}?connect_timeout=15")
    assert took < 1, f"a refused connection took {took:.1f} s"
    assert "connection refused" in str(error)
    assert f"127.0.0.1:{refused_port}" in str(error)
    assert NAMES[store] in str(error)


@pytest.mark.parametrize("store", ["zookeeper", "etcd"])
def test_a_cluster_whose_every_member_refuses_fails_at_once(store: str, face: str) -> None:
    ports = [free_port(), free_port()]
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    error, took = _failure(face, f"{store}://{hosts}?connect_timeout=15")
    assert took < 1, f"refused everywhere took {took:.1f} s"
    for port in ports:
        assert f"127.0.0.1:{port}: connection refused" in str(error)


@pytest.mark.parametrize("store", ["zookeeper", "etcd"])
def test_a_silent_member_is_waited_for_within_the_connect_timeout(
    store: str, face: str, refused_port: int, silent_address: str
) -> None:
    """One member refuses, the other accepts and says nothing (it may be starting): the
    client waits for it, within the connect timeout, and then says what each did."""
    url = f"{store}://127.0.0.1:{refused_port},{silent_address}?connect_timeout=2"
    error, took = _failure(face, url)
    assert took >= 1.5, f"gave up after {took:.1f} s with a member still silent"
    assert took <= 2 + MARGIN, f"connect_timeout=2 took {took:.1f} s"
    assert f"127.0.0.1:{refused_port}: connection refused" in str(error)
    assert f"{silent_address} accepted the connection but does not speak" in str(error)


def test_a_cluster_with_one_live_member_connects(
    face: str, refused_port: int, zookeeper_server: Any, sr_namespace: str
) -> None:
    url = f"zookeeper://127.0.0.1:{refused_port},{zookeeper_server.host_port}{sr_namespace}"
    _connect(face, f"{url}?connect_timeout=15")


WRONG_KINDS = [
    ("zookeeper", "redis_server", "Redis"),
    ("zookeeper", "etcd_server", "etcd or another gRPC (HTTP/2) server"),
    ("etcd", "redis_server", "Redis"),
    ("etcd", "zookeeper_server", "ZooKeeper"),
    ("redis", "zookeeper_server", "ZooKeeper"),
    ("redis", "etcd_server", "etcd or another gRPC (HTTP/2) server"),
]


@pytest.mark.parametrize(("store", "server", "kind"), WRONG_KINDS)
def test_a_server_of_another_store_is_named(
    store: str, server: str, kind: str, face: str, request: pytest.FixtureRequest
) -> None:
    other = request.getfixturevalue(server)
    address = other.endpoint if server == "etcd_server" else other.host_port
    url = f"{store}://{address}?connect_timeout={WRONG_KIND_TIMEOUT}"
    error, took = _failure(face, url)
    assert took <= WRONG_KIND_TIMEOUT + MARGIN, f"{url} took {took:.1f} s"
    said = f"{address} answered but does not speak {NAMES[store]} (it looks like {kind})"
    assert said in str(error)


@pytest.mark.parametrize("store", STORES)
def test_an_http_server_is_named(store: str, face: str, http_address: str) -> None:
    url = f"{store}://{http_address}?connect_timeout={WRONG_KIND_TIMEOUT}"
    error, took = _failure(face, url)
    assert took <= WRONG_KIND_TIMEOUT + MARGIN, f"{url} took {took:.1f} s"
    said = f"{http_address} answered but does not speak {NAMES[store]} (it looks like an HTTP"
    assert said in str(error)
