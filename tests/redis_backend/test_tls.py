"""rediss://: the server's certificate checked against ``ca``, the client's sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import semaphore_recipes as sr
from semaphore_recipes.devtools.redis_server import RedisServer
from semaphore_recipes.testing.certificates import make_certificates


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[Path, RedisServer]]:
    make_certificates(tmp_path)
    files = (str(tmp_path / "server.crt"), str(tmp_path / "server.key"), str(tmp_path / "ca.crt"))
    with RedisServer(tls=files).start() as server:
        yield tmp_path, server


def test_redis_over_tls_with_a_client_certificate(tls_redis: tuple[Path, RedisServer]) -> None:
    d, server = tls_redis
    where = f"127.0.0.1:{server.tls_port}/0?prefix=tls&connect_timeout=3"
    url = f"rediss://{where}&ca={d / 'ca.crt'}&cert={d / 'client.crt'}&key={d / 'client.key'}"
    with sr.connect(url) as backend:
        assert "TLS" in backend.describe()
        with backend.semaphore("t", capacity=1).acquire(timeout=5) as permit:
            assert permit.token > 0
    with pytest.raises(sr.BackendUnavailable):  # the server asks for a client certificate
        sr.connect(f"rediss://{where}&ca={d / 'ca.crt'}")
    with pytest.raises(sr.BackendUnavailable):  # plain text to the TLS port
        sr.connect(f"redis://{where}")
