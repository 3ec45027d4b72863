"""LeaseKeeper against a real etcd: keepalive, revoke, suspension and restoration."""

from __future__ import annotations

import threading
import time

from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.lease import LeaseKeeper
from semaphore_recipes.testing.etcd_server import EtcdServer

from .helpers import wait_until


class Recorder:
    """Collects keeper callbacks with their monotonic times."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.expired = threading.Event()
        self.suspended = threading.Event()
        self.restored = threading.Event()

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def keeper(
        self,
        client: EtcdClient,
        lease: int,
        ttl: float,
        interval: float | None = None,
        suspend_after: float | None = None,
    ) -> LeaseKeeper:
        def cb(name: str, event: threading.Event) -> None:
            self.calls.append((name, time.monotonic()))
            event.set()

        return LeaseKeeper(
            client,
            lease,
            ttl,
            on_expired=lambda: cb("expired", self.expired),
            on_suspended=lambda: cb("suspended", self.suspended),
            on_restored=lambda: cb("restored", self.restored),
            interval=interval,
            suspend_after=suspend_after,
        )


def test_keepalive_keeps_a_2s_lease_for_5s_then_revoke_expires(client: EtcdClient, ns: str) -> None:
    lease, ttl = client.lease_grant(2)
    assert ttl == 2
    client.put(ns + "entry", "x", lease=lease)
    rec = Recorder()
    keeper = rec.keeper(client, lease, ttl)
    try:
        time.sleep(5.0)
        assert client.lease_time_to_live(lease).TTL > 0
        assert client.range(ns + "entry").count == 1
        assert rec.calls == []
        assert time.monotonic() - keeper.last_ack < ttl / 3 + 0.3
        assert not keeper.suspended and not keeper.expired

        client.lease_revoke(lease)
        assert client.range(ns + "entry").count == 0
        # the next keepalive (within ttl/3) is answered with TTL 0
        assert rec.expired.wait(ttl / 3 + 1.0)
        assert rec.names() == ["expired"] and keeper.expired
        wait_until(lambda: not keeper.running, 2.0, "keeper thread to end")
    finally:
        keeper.stop()


def test_unknown_lease_expires_at_once(client: EtcdClient) -> None:
    rec = Recorder()
    keeper = rec.keeper(client, 0x7777777, 3.0)
    try:
        assert rec.expired.wait(2.0)
    finally:
        keeper.stop()


def test_suspended_while_server_paused_then_restored(scratch_server: EtcdServer) -> None:
    with EtcdClient([scratch_server.endpoint]) as client:
        lease, ttl = client.lease_grant(20)
        rec = Recorder()
        keeper = rec.keeper(client, lease, ttl, interval=0.2, suspend_after=0.6)
        try:
            wait_until(lambda: time.monotonic() - keeper.last_ack < 0.1, 2.0, "a first ack")
            scratch_server.pause()
            paused_at = time.monotonic()
            try:
                assert rec.suspended.wait(3.0)
                # reported about suspend_after after the last ack, not a whole TTL later
                assert rec.calls[0][1] - paused_at < 0.6 + 0.4
                assert keeper.suspended
                time.sleep(0.8)  # stays suspended, reported once per episode
                assert rec.names() == ["suspended"]
            finally:
                scratch_server.resume()
            assert rec.restored.wait(5.0)
            assert rec.names() == ["suspended", "restored"] and not keeper.suspended
            assert client.lease_time_to_live(lease).TTL > 0
        finally:
            keeper.stop()
            client.lease_revoke(lease)


def test_keeper_survives_a_restart(scratch_server: EtcdServer) -> None:
    with EtcdClient([scratch_server.endpoint]) as client:
        lease, ttl = client.lease_grant(10)
        rec = Recorder()
        keeper = rec.keeper(client, lease, ttl, interval=0.2, suspend_after=3.0)
        try:
            scratch_server.restart()
            before = keeper.last_ack
            wait_until(lambda: keeper.last_ack > before + 0.3, 5.0, "acks after the restart")
            assert "expired" not in rec.names()
            assert client.lease_time_to_live(lease).TTL > 0
        finally:
            keeper.stop()
        assert not keeper.running
