"""The Redis Cluster the tests start (semaphore_recipes.devtools.redis_cluster): it
comes up with every slot served, its slot arithmetic is the server's, and a killed
primary's slots move to its replica."""

from __future__ import annotations

import socket

import pytest

from semaphore_recipes.devtools.redis_cluster import RedisCluster
from semaphore_recipes.devtools.redis_server import CLUSTER_HIGHEST_PORT
from semaphore_recipes.redis.layout import key_slot


def _ask(port: int, command: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(command.encode() + b"\r\n")
        return sock.recv(65536).decode()


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> RedisCluster:
    return redis_cluster  # (the session's: 3 primaries, a replica each)


def test_every_slot_is_served_and_every_port_leaves_room_for_the_bus(
    cluster: RedisCluster,
) -> None:
    info = _ask(cluster.nodes[0].port, "CLUSTER INFO")
    assert "cluster_state:ok" in info and "cluster_slots_ok:16384" in info
    assert "cluster_known_nodes:6" in info
    assert all(node.port <= CLUSTER_HIGHEST_PORT for node in cluster.nodes)


@pytest.mark.parametrize("key", ["a", "semaphore_recipes:{jobs}:q", "{}x", "{a}{b}", "x{y", "é"])
def test_key_slot_is_the_servers(cluster: RedisCluster, key: str) -> None:
    reply = _ask(cluster.nodes[0].port, f'CLUSTER KEYSLOT "{key}"')
    assert reply == f":{key_slot(key)}\r\n"


def test_a_killed_primary_s_slot_moves_to_a_replica_and_it_comes_back_as_one(
    cluster: RedisCluster,
) -> None:
    old = cluster.kill_primary_of("moving")
    new = cluster.wait_for_failover("moving", old)
    assert new is not old
    old.start()
    assert cluster.wait_for_failover("moving", old) is new  # (a replica of it now)
