"""Authentication against a real etcd with auth enabled (set up over the Auth gRPC service)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.errors import EtcdAuthError, EtcdError
from semaphore_recipes.etcd.lease import LeaseKeeper
from semaphore_recipes.etcd.watch import Watcher
from semaphore_recipes.testing.etcd_auth import EtcdAuthAdmin
from semaphore_recipes.testing.etcd_server import EtcdServer

from .helpers import retry, wait_until

USER, PASSWORD = "root", "s3cret"


@pytest.fixture(scope="module")
def auth_server() -> Iterator[EtcdServer]:
    with EtcdServer(name="auth") as server:
        with EtcdAuthAdmin(server.endpoint) as admin:
            admin.enable_auth(root_password=PASSWORD)
        yield server


def test_auth_required_and_accepted(auth_server: EtcdServer) -> None:
    with EtcdClient([auth_server.endpoint]) as anonymous, pytest.raises(EtcdAuthError):
        anonymous.range("k")
    with EtcdClient([auth_server.endpoint], user=USER, password="wrong") as bad:
        with pytest.raises(EtcdAuthError) as err:
            bad.range("k")
        assert err.value.__cause__ is not None
    with EtcdClient([auth_server.endpoint], user=USER, password=PASSWORD) as client:
        rev = client.put("k", "v").header.revision
        assert client.range("k").kvs[0].mod_revision == rev


def test_invalid_token_reauthenticates_once(auth_server: EtcdServer) -> None:
    with EtcdClient([auth_server.endpoint], user=USER, password=PASSWORD) as client:
        client.put("k", "v")
        client._auth.token = "not-a-token"  # as after a token expiry
        assert client.range("k").count == 1
        assert client._auth.token != "not-a-token"
        # simple tokens do not survive a restart: the client gets a new one by itself
        auth_server.restart()
        assert retry(lambda: client.range("k").count) == 1


def test_streams_with_auth(auth_server: EtcdServer) -> None:
    with EtcdClient([auth_server.endpoint], user=USER, password=PASSWORD) as client:
        lease, ttl = client.lease_grant(10)
        expired: list[bool] = []
        keeper = LeaseKeeper(
            client,
            lease,
            ttl,
            interval=0.1,
            on_expired=lambda: expired.append(True),
            on_suspended=lambda: None,
            on_restored=lambda: None,
        )
        got: list[int] = []
        client._auth.token = "stale"  # the watch stream must re-authenticate too
        watcher = Watcher(client, "w", start_revision=0, on_events=lambda evs, rev: got.append(rev))
        try:
            assert watcher.created.wait(5.0)
            rev = client.put("w", "1").header.revision
            wait_until(lambda: got == [rev], 5.0, "the watched put")
            before = keeper.last_ack
            wait_until(lambda: keeper.last_ack > before, 2.0, "keepalive acks")
            assert not expired
        finally:
            watcher.cancel()
            keeper.stop()
            client.lease_revoke(lease)

    with EtcdClient([auth_server.endpoint]) as anonymous:
        errors: list[Exception] = []
        denied = Watcher(
            anonymous, "w", start_revision=0, on_events=lambda e, r: None, on_error=errors.append
        )
        wait_until(lambda: errors, 5.0, "the watch to be refused")
        assert isinstance(errors[0], EtcdAuthError)
        wait_until(lambda: not denied.running, 5.0, "the refused watcher to stop")
        assert isinstance(denied.error, EtcdError)
