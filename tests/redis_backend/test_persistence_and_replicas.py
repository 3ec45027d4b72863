"""A server restart with persistence on, and what ``wait_replicas`` changes on failover.

These start servers of their own (the session's server is not persistent and has no
replica): a primary writing an append-only file synced at every write, and a primary
with one replica whose failover the test makes by hand (kill the primary, promote the
replica), as Sentinel would.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

import semaphore_recipes as sr
from semaphore_recipes.devtools.redis_server import RedisServer
from semaphore_recipes.testing.proxy import FaultProxy

from ..conftest import wait_until


def _url(server: RedisServer, prefix: str, **params: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"prefix": prefix, **params}.items())
    return f"redis://{server.host_port}/0?{query}"


@pytest.fixture
def prefix() -> str:
    return f"sr-tests/{uuid.uuid4().hex[:8]}"


@pytest.fixture
def persistent() -> Iterator[RedisServer]:
    with RedisServer(persistent=True).start() as server:
        yield server


@pytest.fixture
def primary() -> Iterator[RedisServer]:
    with RedisServer().start() as server:
        yield server


@pytest.fixture
def link(primary: RedisServer) -> Iterator[FaultProxy]:
    """The replication link, through a fault proxy: a blackhole is replication lag
    that a failover makes final (a paused replica would still read what the kernel
    buffered for it)."""
    with FaultProxy(primary.host_port) as proxy:
        yield proxy


@pytest.fixture
def replica(link: FaultProxy) -> Iterator[RedisServer]:
    with RedisServer(replica_of=link.address).start() as server:
        yield server


def test_a_killed_and_restarted_persistent_server_keeps_queue_leases_and_tokens(
    persistent: RedisServer, prefix: str
) -> None:
    url = _url(persistent, prefix, session_timeout=10)
    with sr.connect(url) as a, sr.connect(url) as b:
        held = a.semaphore("restart", capacity=1).acquire(timeout=5)
        sem_b = b.semaphore("restart", capacity=1)
        got: list[sr.Permit] = []
        t = threading.Thread(target=lambda: got.append(sem_b.acquire(timeout=30)), daemon=True)
        t.start()
        wait_until(lambda: len(sem_b.status().waiters) == 1)
        persistent.kill()  # SIGKILL: only what reached the append-only file survives
        wait_until(lambda: held.state is sr.PermitState.SUSPENDED, timeout=10)
        persistent.start()
        wait_until(lambda: held.state is sr.PermitState.HELD, timeout=10)
        status = sem_b.status()  # the queue came back as it was
        assert [h.token for h in status.holders] == [held.token]
        assert len(status.waiters) == 1
        held.release()
        t.join(10)
        assert got and got[0].state is sr.PermitState.HELD
        assert got[0].token > held.token
        got[0].release()
        again = a.semaphore("restart", capacity=1).acquire(timeout=5)
        assert again.token > got[0].token  # the counter did not go back
        again.release()


def _promote(replica: RedisServer) -> None:
    assert replica.command_reply(b"REPLICAOF NO ONE") == "+OK"


def test_without_wait_replicas_a_failover_can_lose_a_grant(
    primary: RedisServer, replica: RedisServer, link: FaultProxy, prefix: str
) -> None:
    link.blackhole()  # replication falls behind
    # (request_timeout: the close after the primary's death gives up sooner)
    with sr.connect(_url(primary, prefix, session_timeout=10, request_timeout=1)) as backend:
        permit = backend.semaphore("failover", capacity=1).acquire(timeout=5)
        primary.kill()
        _promote(replica)
        with sr.connect(_url(replica, prefix, session_timeout=10)) as other:
            # The promoted replica never saw the grant: a second holder (the limit
            # docs/operations.md states).
            second = other.semaphore("failover", capacity=1).acquire(blocking=False)
            assert second.state is sr.PermitState.HELD
            second.release()
        assert permit is not None


def test_wait_replicas_refuses_a_grant_the_replica_lacks_and_keeps_one_it_has(
    primary: RedisServer, replica: RedisServer, link: FaultProxy, prefix: str
) -> None:
    # (request_timeout 3: WAIT gets 1.5 s; the link runs through a Python proxy on a
    # loaded machine, and 0.5 s once refused a grant the replica was about to have)
    url = _url(primary, prefix, session_timeout=10, wait_replicas=1, request_timeout=3)
    with sr.connect(url) as backend:
        sem = backend.semaphore("failover", capacity=1)
        link.blackhole()
        with pytest.raises(sr.BackendUnavailable, match="replica"):
            sem.acquire(timeout=0)
        link.cut()  # the replica reconnects and catches up
        link.restore()
        wait_until(lambda: sem.status().holders == ())  # the refused grant was removed
        permit = sem.acquire(timeout=5)
        primary.kill()
        _promote(replica)
        # The grant reached the replica before acquire returned: it survives.
        other = sr.connect(_url(replica, prefix, session_timeout=10))
        with other, pytest.raises(sr.WouldBlock):
            other.semaphore("failover", capacity=1).acquire(blocking=False)
        assert permit.token > 0


def test_wait_replicas_waits_for_a_fenced_write_too(
    primary: RedisServer, replica: RedisServer, link: FaultProxy, prefix: str
) -> None:
    """A commit returns once the replica has its writes; while the replica lags it is
    BackendUnavailable (its writes are on the primary alone)."""
    # (request_timeout 3: WAIT gets 1.5 s; the link runs through a Python proxy on a
    # loaded machine, and 0.5 s once refused a grant the replica was about to have)
    url = _url(primary, prefix, session_timeout=10, wait_replicas=1, request_timeout=3)
    with sr.connect(url) as backend:
        key = backend.data_key("fenced")
        with backend.semaphore("fenced", capacity=1).acquire(timeout=5) as permit:
            link.blackhole()
            with pytest.raises(sr.BackendUnavailable, match="fenced writes reached 0 of"):
                permit.transaction().create(key, b"unreplicated").commit()
            link.cut()  # the replica reconnects and catches up
            link.restore()
            permit.transaction().set(key, b"replicated").commit()
            primary.kill()  # nothing waits for the replica now: it had the write
            _promote(replica)
            assert replica.command_reply(f"GET {key}".encode(), whole=True) == "$10\r\nreplicated"
