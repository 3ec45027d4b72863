"""ZooKeeper over TLS, as docs/operations.md shows it: a server with a TLS client port
that requires a client certificate (``ZooKeeperServer(tls=...)``: Netty, PEM key and
trust stores, ``ssl.clientAuth=need``), certificates made with openssl
(:mod:`semaphore_recipes.testing.certificates`), through both faces.

One server for the module. A refusal over a certificate ends the connect at once (kazoo
would retry it until the connect timeout), saying that TLS failed and why; a handshake
that fails otherwise (a plain port) is retried until the connect timeout.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.devtools.zookeeper_server import ZooKeeperServer
from semaphore_recipes.testing.certificates import Certificates, make_certificates
from semaphore_recipes.testing.faces import BlockingAsyncBackend, Face, LoopThread

from ..conftest import wait_until

#: the connect timeout of the refusals over a certificate: they must come much sooner
CONNECT_TIMEOUT = 60
REFUSED_WITHIN = 15  # seconds: one handshake per server, on a loaded machine


@dataclass(frozen=True)
class TLSZooKeeper:
    server: ZooKeeperServer
    certificates: Certificates  #: the server's CA, and a client certificate it signed
    other: Certificates  #: an unrelated CA, with certificates of its own

    def url(self, **params: object) -> str:
        query = urllib.parse.urlencode(params)
        return f"zookeeper://{self.server.tls_host_port}/tls?{query}"

    def client_url(self, **params: object) -> str:
        """The documented URL: the server checked against the CA, our certificate sent."""
        c = self.certificates
        return self.url(ca=c.ca, certfile=c.client_cert, keyfile=c.client_key, **params)


@pytest.fixture(scope="module")
def tls_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSZooKeeper]:
    directory = tmp_path_factory.mktemp("zk-tls")
    certificates = make_certificates(directory / "ca")
    other = make_certificates(directory / "other-ca")
    files = (str(certificates.server_cert), str(certificates.server_key), str(certificates.ca))
    server = ZooKeeperServer(workdir=directory / "server", tls=files)
    server.start_or_close(60)
    try:
        yield TLSZooKeeper(server, certificates, other)
    finally:
        server.close()


@pytest.fixture(params=list(Face), ids=lambda face: face.value)
def connect(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``connect(url)`` through the face of the test (``sr.connect`` or
    ``sr.aio.connect``, the latter seen through a blocking view); closed at teardown."""
    backends: list[Any] = []
    loop = LoopThread() if request.param is Face.ASYNC else None

    def connect(url: str) -> Any:
        if loop is None:
            backend: Any = sr.connect(url)
        else:

            async def connecting() -> sr.aio.AsyncBackend:
                return await sr.aio.connect(url)

            backend = BlockingAsyncBackend(loop.run(connecting()), loop)
        backends.append(backend)
        return backend

    yield connect
    for backend in backends:
        backend.close()
    if loop is not None:
        loop.close()


def test_fifo_acquire_and_release_over_tls_with_a_client_certificate(
    tls_zookeeper: TLSZooKeeper, connect: Any
) -> None:
    backend = connect(tls_zookeeper.client_url(session_timeout=4))
    assert "over TLS" in backend.describe()
    sem = backend.semaphore("fifo", capacity=1)
    holder = sem.acquire(timeout=10)
    granted: list[sr.Permit] = []

    def wait() -> None:
        granted.append(sem.acquire(timeout=10))

    waiters = []
    for expected in (1, 2):  # queued one after the other: first in, first granted
        waiter = threading.Thread(target=wait)
        waiter.start()
        waiters.append(waiter)
        wait_until(lambda n=expected: len(sem.status().waiters) == n)  # type: ignore[misc]
    tokens = [holder.token]
    holder.release()
    waiters[0].join(10)
    assert len(granted) == 1 and waiters[1].is_alive()
    tokens.append(granted[0].token)
    granted[0].release()
    waiters[1].join(10)
    assert len(granted) == 2
    tokens.append(granted[1].token)
    granted[1].release()
    assert tokens == sorted(set(tokens)), f"fencing tokens not increasing: {tokens}"
    status = sem.status()
    assert status.holders == () and status.waiters == ()


def test_a_server_certificate_of_another_ca_is_refused_naming_tls(
    tls_zookeeper: TLSZooKeeper, connect: Any
) -> None:
    c, other = tls_zookeeper.certificates, tls_zookeeper.other
    url = tls_zookeeper.url(
        ca=other.ca, certfile=c.client_cert, keyfile=c.client_key, connect_timeout=CONNECT_TIMEOUT
    )
    start = time.monotonic()
    with pytest.raises(sr.BackendUnavailable, match=r"TLS .*certificate verification failed"):
        connect(url)
    assert time.monotonic() - start < REFUSED_WITHIN  # not at the connect timeout


def test_a_missing_client_certificate_is_refused_naming_it(
    tls_zookeeper: TLSZooKeeper, connect: Any
) -> None:
    url = tls_zookeeper.url(ca=tls_zookeeper.certificates.ca, connect_timeout=CONNECT_TIMEOUT)
    start = time.monotonic()
    with pytest.raises(sr.BackendUnavailable, match=r"TLS .*wants a client certificate"):
        connect(url)
    assert time.monotonic() - start < REFUSED_WITHIN


def test_a_client_certificate_of_another_ca_is_refused(tls_zookeeper: TLSZooKeeper) -> None:
    other = tls_zookeeper.other
    url = tls_zookeeper.url(
        ca=tls_zookeeper.certificates.ca,
        certfile=other.client_cert,
        keyfile=other.client_key,
        connect_timeout=CONNECT_TIMEOUT,
    )
    start = time.monotonic()
    with pytest.raises(sr.BackendUnavailable, match=r"TLS .*wants a client certificate"):
        sr.connect(url)
    assert time.monotonic() - start < REFUSED_WITHIN


def test_tls_to_the_plain_port_is_refused_naming_tls(tls_zookeeper: TLSZooKeeper) -> None:
    url = tls_zookeeper.client_url(connect_timeout=2)  # retried until then
    plain = url.replace(tls_zookeeper.server.tls_host_port, tls_zookeeper.server.host_port)
    with pytest.raises(sr.BackendUnavailable, match=r"TLS .*secureClientPort"):
        sr.connect(plain)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"certfile": "client.crt"}, "certfile and keyfile go together"),
        ({"tls": "true", "keyfile": "client.key"}, "certfile and keyfile go together"),
        ({"ca": "missing.crt"}, "missing.crt': no readable file there"),
        ({"tls": "on"}, "tls='on': true/1/yes or false/0/no"),
        ({"tls": "false", "ca": "ca.crt"}, "tls=false with ca"),
        ({"verify": "false"}, "verify is a TLS parameter"),
    ],
)
def test_bad_tls_parameters_fail_before_any_io(
    tmp_path: Path, params: dict[str, str], message: str
) -> None:
    for name in ("client.crt", "client.key", "ca.crt"):
        (tmp_path / name).write_text("")
    files = {k: str(tmp_path / v) if "." in v else v for k, v in params.items()}
    # nothing listens on port 9: a connection attempt would be BackendUnavailable
    with pytest.raises(ValueError, match=re.escape(message)):
        sr.connect("zookeeper://127.0.0.1:9/x?" + urllib.parse.urlencode(files))
