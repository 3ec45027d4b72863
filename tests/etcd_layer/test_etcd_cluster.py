"""A 3-member cluster: leader found, killed, clients fail over, the member rejoins."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.errors import EtcdUnavailable
from semaphore_recipes.etcd.lease import LeaseKeeper
from semaphore_recipes.etcd.ops import prefix_range_end
from semaphore_recipes.etcd.watch import Event, Watcher
from semaphore_recipes.testing.etcd_server import EtcdCluster

from .helpers import member_status, serializable_range, wait_until

T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster() -> Iterator[EtcdCluster]:
    with EtcdCluster(3) as c:
        yield c


class Retrier:
    """Retry on EtcdUnavailable (the documented contract of failover) and count retries."""

    def __init__(self, timeout: float = 15.0) -> None:
        self.timeout = timeout
        self.unavailable = 0

    def __call__(self, fn: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return fn()
            except EtcdUnavailable:
                self.unavailable += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)


def test_leader_kill_failover_and_rejoin(cluster: EtcdCluster) -> None:
    ns = "/sr-cluster/"
    old_leader = cluster.leader()
    assert sum(m.is_leader() for m in cluster.members) == 1
    # the leader first: pick_first connects to it, so killing it breaks this very channel
    endpoints = [old_leader.endpoint] + [e for e in cluster.endpoints if e != old_leader.endpoint]
    retry = Retrier()
    events: list[tuple[str, int]] = []
    lost: list[str] = []

    def on_events(evs: list[Event], revision: int) -> None:
        events.extend((ev.kv.key.decode(), ev.kv.mod_revision) for ev in evs)

    with EtcdClient(endpoints, timeout=2.0) as client:
        status = member_status(client)
        assert status.leader == status.header.member_id  # connected to the leader
        lease, ttl = client.lease_grant(5)
        keeper = LeaseKeeper(
            client,
            lease,
            ttl,
            on_expired=lambda: lost.append("expired"),
            on_suspended=lambda: lost.append("suspended"),
            on_restored=lambda: lost.append("restored"),
        )
        start = client.put(ns + "start", "x").header.revision + 1
        watcher = Watcher(
            client, ns, prefix_range_end(ns), start_revision=start, on_events=on_events
        )
        try:
            assert watcher.created.wait(5.0)
            revisions = {}
            for i in range(20):
                if i == 5:
                    old_leader.kill()
                key = f"{ns}k{i:02d}"
                put = functools.partial(client.put, key, "v", lease=lease)
                revisions[key] = retry(put).header.revision
            assert retry.unavailable >= 1  # failover is visible to the caller, once or a few times
            new_leader = cluster.leader()
            assert new_leader is not old_leader

            # the watcher re-created its watch on another member and missed nothing
            wait_until(lambda: {k for k, _ in events} >= set(revisions), 10.0, "all 20 events")
            seen = [rev for _, rev in events]
            assert seen == sorted(seen) and len(seen) == len(set(seen))
            for key, rev in revisions.items():
                assert (key, rev) in events  # a retried put may add an extra event, never lose one
            assert retry(lambda: client.lease_time_to_live(lease)).TTL > 0
            assert "expired" not in lost

            # the killed member comes back with its data and catches up
            old_leader.restart()
            with EtcdClient([old_leader.endpoint]) as direct:
                last = max(revisions.values())
                wait_until(
                    lambda: (
                        retry(
                            lambda: serializable_range(direct, ns, prefix_range_end(ns))
                        ).header.revision
                        >= last
                    ),
                    10.0,
                    "the restarted member to catch up",
                )
                got = retry(lambda: serializable_range(direct, ns, prefix_range_end(ns)))
                assert {kv.key.decode() for kv in got.kvs} >= set(revisions)
                # it follows the cluster's leader (polled: a snapshot of the members can
                # catch an election in progress, seen once in ~20 runs)
                wait_until(
                    lambda: (
                        retry(lambda: member_status(direct)).leader
                        == retry(lambda: member_status(client)).leader
                        != 0
                    ),
                    10.0,
                    "the restarted member to follow the leader",
                )
            # (polled too: the leader's gauge, read a moment after the leader was found,
            # can catch the election the rejoining member may start on a loaded machine)
            wait_until(
                lambda: cluster.leader().metrics().get("etcd_server_has_leader") == 1.0,
                10.0,
                "a leader that has a leader",
            )
        finally:
            watcher.cancel()
            keeper.stop()
        retry(lambda: client.lease_revoke(lease))


def test_watch_keeps_working_when_a_follower_is_paused(cluster: EtcdCluster) -> None:
    """A frozen (not crashed) follower: the cluster keeps quorum, clients on the leader
    see no error at all."""
    leader = cluster.leader()
    follower = next(m for m in cluster.members if m is not leader)
    got = threading.Event()
    with EtcdClient([leader.endpoint]) as client:
        w = Watcher(client, "/sr-pause/", start_revision=0, on_events=lambda e, r: got.set())
        try:
            assert w.created.wait(5.0)
            follower.pause()
            try:
                client.put("/sr-pause/", "x")
                assert got.wait(5.0)
            finally:
                follower.resume()
        finally:
            w.cancel()
