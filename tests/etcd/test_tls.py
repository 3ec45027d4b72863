"""TLS to etcd: a CA, a server certificate and a client certificate made with openssl
(:mod:`semaphore_recipes.testing.certificates`)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio
from semaphore_recipes.devtools.etcd_server import find_etcd_binary
from semaphore_recipes.devtools.processes import free_port
from semaphore_recipes.testing.certificates import make_certificates


@pytest.fixture
def tls_etcd(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    make_certificates(tmp_path)
    client_port, peer_port = free_port(), free_port()
    url = f"https://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    log = (tmp_path / "etcd.log").open("wb")
    proc = subprocess.Popen(
        [
            find_etcd_binary(),
            "--name",
            "tls",
            "--data-dir",
            str(tmp_path / "data"),
            "--listen-client-urls",
            url,
            "--advertise-client-urls",
            url,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"tls={peer}",
            "--heartbeat-interval",
            "20",
            "--election-timeout",
            "200",
            "--logger",
            "zap",
            "--log-level",
            "error",
            "--cert-file",
            str(tmp_path / "server.crt"),
            "--key-file",
            str(tmp_path / "server.key"),
            "--client-cert-auth",
            "--trusted-ca-file",
            str(tmp_path / "ca.crt"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_listening(proc, client_port, tmp_path / "etcd.log")
        yield tmp_path, f"127.0.0.1:{client_port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until etcd accepts connections on ``port`` (its start takes longer on a busy machine)."""
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"etcd exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                tail = log.read_text()[-2000:]
                raise AssertionError(f"etcd not listening in 30 s: {tail}") from exc
            time.sleep(0.05)


def test_etcd_over_tls_with_a_client_certificate(tls_etcd: tuple[Path, str]) -> None:
    d, endpoint = tls_etcd
    q = urllib.parse.urlencode(
        {
            "ca": d / "ca.crt",
            "cert": d / "client.crt",
            "key": d / "client.key",
            "session_timeout": 4,
        }
    )
    with sr.connect(f"etcd://{endpoint}/tls?{q}") as backend:
        sem = backend.semaphore("tls", capacity=1)
        with sem.acquire(timeout=10) as permit:
            assert permit.token > 0
        assert sem.status().holders == ()

    async def on_the_asyncio_face() -> None:  # (the lease keeper's connection too)
        async with aio.connect(f"etcd://{endpoint}/tls?{q}") as backend:
            sem = backend.semaphore("tls", capacity=1)
            async with sem.acquire(timeout=10) as permit:
                held = time.monotonic()
                while time.monotonic() - held < 3.0:  # a TTL of 4 s: renewed twice
                    await asyncio.sleep(0.1)
                assert not permit.lost.is_set()
                assert backend.session_state is sr.SessionState.CONNECTED

    asyncio.run(asyncio.wait_for(on_the_asyncio_face(), 60))
    # without the client certificate the server refuses us
    q = urllib.parse.urlencode({"ca": d / "ca.crt", "connect_timeout": 2})
    with pytest.raises(sr.BackendUnavailable):
        sr.connect(f"etcd://{endpoint}/tls?{q}")
