"""Redis Cluster: a semaphore's keys in one slot, acquire_all only within a hash tag,
fenced writes only to the semaphore's slot (both refused before any I/O), wake-ups
that reach a client from any slot, and a bounded number of connections per client."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio
from semaphore_recipes.redis.connections import MAX_ASYNC_CONNECTIONS
from semaphore_recipes.redis.layout import key_slot
from semaphore_recipes.testing.faces import store_backend
from semaphore_recipes.testing.redis_harness import RedisClusterHarness


class CountedCalls:
    """Counts the requests a backend's calls runner answers (its keeper and notifier
    have runners of their own)."""

    def __init__(self, client: Any) -> None:
        runner = store_backend(client).sync
        self.count = 0
        answer = runner._answer

        def counted(pending: object) -> object:
            self.count += 1
            return answer(pending)

        runner._answer = counted


def test_every_key_of_a_semaphore_is_in_its_tag_s_slot(
    redis_cluster_harness: RedisClusterHarness,
) -> None:
    backend = redis_cluster_harness.connect()
    names = ["alpha", "beta", "{grp}one", "{grp}two"]
    permits = []
    for name in names:
        sem = backend.semaphore(name, capacity=1)
        permit = sem.acquire(timeout=5)
        permit.transaction().create(backend.data_key(name, "value"), b"x").commit()
        permits.append(permit)
    prefix = redis_cluster_harness.prefix
    keys = [k.decode() for k in redis_cluster_harness.admin.scan_iter(match=f"{prefix}:*")]
    for name in names:
        tag = name[1:].split("}")[0] if name.startswith("{") else name
        mine = [k for k in keys if k.startswith(f"{prefix}:{{{tag}}}:")]
        # queue, entries, capacity, openers, data, lease, counter (inbox: none pending)
        assert len(mine) >= 6, mine
        assert {key_slot(k) for k in mine} == {key_slot(f"{{{tag}}}")}
    assert not [k for k in keys if "{" not in k], "a key outside every hash tag"
    for permit in permits:
        permit.release()


def test_acquire_all_across_hash_tags_is_refused_before_any_io(
    redis_cluster_harness: RedisClusterHarness,
) -> None:
    backend = redis_cluster_harness.connect()
    backend.semaphore("left", capacity=1)
    backend.semaphore("right", capacity=1)
    calls = CountedCalls(backend)
    with pytest.raises(sr.NotSupported, match="hash tag"):
        backend.acquire_all({"left": 1, "right": 1}, timeout=5)
    assert calls.count == 0
    # one tag: one script takes both, with one token
    left = backend.semaphore("{pair}left", capacity=1)
    right = backend.semaphore("{pair}right", capacity=1)
    with backend.acquire_all({left: 1, right: 1}, timeout=5) as permit:
        assert len(set(permit.tokens.values())) == 1
    assert redis_cluster_harness.entries() == []


def test_a_fenced_write_outside_the_semaphore_s_slot_is_refused_before_any_io(
    redis_cluster_harness: RedisClusterHarness,
) -> None:
    backend = redis_cluster_harness.connect()
    admin = redis_cluster_harness.admin
    with backend.semaphore("fenced", capacity=1).acquire(timeout=5) as permit:
        calls = CountedCalls(backend)
        with pytest.raises(ValueError, match="hash slot"):
            permit.transaction().set("elsewhere", b"x").commit()
        assert calls.count == 0
        permit.transaction().create("mine:{fenced}", b"x").commit()  # the tag: its slot
    assert admin.get("mine:{fenced}") == b"x"
    admin.delete("mine:{fenced}")


def _doorbell_connections(admin: Any) -> dict[str, list[int]]:
    """Per primary, the shard channels of each connection subscribed to any."""
    found: dict[str, list[int]] = {}
    for node in admin.get_primaries():
        clients = node.redis_connection.client_list()
        found[node.name] = [int(c["ssub"]) for c in clients if int(c.get("ssub", 0))]
    return found


def _waiting_on(
    make: Callable[[], Any], names: list[str]
) -> tuple[Any, list[threading.Thread], list[Any]]:
    """A backend whose threads wait on each of ``names`` (each held elsewhere)."""
    backend = make()
    got: list[Any] = []
    threads = [
        threading.Thread(
            target=lambda n=name: got.append(backend.semaphore(n, capacity=1).acquire(timeout=30))
        )
        for name in names
    ]
    for thread in threads:
        thread.start()
    return backend, threads, got


def test_releases_in_every_slot_wake_one_client_over_a_bounded_set_of_connections(
    redis_cluster_harness: RedisClusterHarness,
) -> None:
    names = [f"w{i}" for i in range(24)]  # tags spread over the three primaries
    holder = redis_cluster_harness.connect()
    held = [holder.semaphore(n, capacity=1).acquire(timeout=5) for n in names]
    waiter, threads, got = _waiting_on(redis_cluster_harness.connect, names)
    time.sleep(1.0)  # every waiter enqueued and its tag's doorbell listened to
    # one doorbell connection per client and primary for all the client's tags (the
    # holder listens too: someone may delete its entries), not one per tag or waiter
    listening = _doorbell_connections(redis_cluster_harness.admin)
    assert all(len(per_node) == 2 for per_node in listening.values()), listening
    assert sum(sum(per_node) for per_node in listening.values()) == 2 * len(names)
    assert len(redis_cluster_harness.sessions()) == 2
    started = time.monotonic()
    for permit in held:
        permit.release()
    for thread in threads:
        thread.join(10)
    assert len(got) == len(names), "a waiter was not woken"
    # woken by doorbells, not by the timed looks (those come after a lease's expiry)
    assert time.monotonic() - started < 3.0
    for permit in got:
        permit.release()
    waiter.close()


def test_an_asyncio_client_has_a_bounded_number_of_calls_out_on_a_cluster(
    redis_cluster_harness: RedisClusterHarness,
) -> None:
    """300 tasks reading a status at once through one asyncio cluster backend: they take
    turns, at most MAX_ASYNC_CONNECTIONS calls out, so no node gets more connections
    from it than that (redis-py's per-node pools have no limit: a connection per task
    before: 100 on each node serving the slot)."""
    tasks = 300
    admin: Any = redis_cluster_harness.admin  # (a RedisCluster: every node, replicas too)

    def connections() -> dict[str, int]:
        return {node.name: len(node.redis_connection.client_list()) for node in admin.get_nodes()}

    async def scenario() -> tuple[dict[str, int], int]:
        async with aio.connect(redis_cluster_harness.url) as backend:
            sem = backend.semaphore("turns", capacity=2)
            holder = await sem.acquire()
            statuses = await asyncio.gather(*(sem.status() for _ in range(tasks)))
            after = connections()
            await holder.release()
            return after, sum(len(status.holders) for status in statuses)

    before = connections()
    after, holders_seen = asyncio.run(scenario())
    assert holders_seen == tasks
    opened = {name: after[name] - before.get(name, 0) for name in after}
    # (its turns, and the few connections of its own: keeper, notifier, slot maps)
    assert max(opened.values()) <= MAX_ASYNC_CONNECTIONS + 6 < tasks, opened
