"""Through Sentinel, a failover is followed: a new primary is found, and sessions and
waiters carry over when it has their writes; a promoted replica that lacks writes this
client saw ends the backend (StoreHistoryReset); under load, what a failover can lose
(grants the old primary acknowledged and did not replicate), and what ``wait_replicas=1``
changes.

Each test starts a set of its own (primary, replica, 3 sentinels: ~2 s), since it kills
the primary.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis

import semaphore_recipes as sr
from semaphore_recipes.devtools.redis_sentinel import RedisSentinelSet
from semaphore_recipes.testing.proxy import FaultProxy
from semaphore_recipes.testing.redis_harness import live_redis_entries

from ..conftest import wait_until


@pytest.fixture
def prefix() -> str:
    return f"sr-tests/{uuid.uuid4().hex[:8]}"


@pytest.fixture
def sentinel_set() -> Iterator[RedisSentinelSet]:
    with RedisSentinelSet() as started:
        yield started


def _admin(node_port: int) -> redis.Redis:
    return redis.Redis(port=node_port, socket_timeout=5.0)


def test_a_holder_and_a_waiter_carry_over_a_failover(
    sentinel_set: RedisSentinelSet, prefix: str
) -> None:
    url = sentinel_set.url(f"prefix={prefix}&session_timeout=10")
    with sr.connect(url) as first, sr.connect(url) as second:
        held = first.semaphore("f", capacity=1).acquire(timeout=5)
        waiting = second.semaphore("f", capacity=1)
        got: list[sr.Permit] = []
        waiter = threading.Thread(target=lambda: got.append(waiting.acquire(timeout=30)))
        waiter.start()
        wait_until(lambda: len(waiting.status().waiters) == 1, timeout=5)
        wait_until(sentinel_set.replicated, timeout=5)

        old = sentinel_set.kill_primary()
        new = sentinel_set.wait_for_new_primary(old)
        # the session carried over: the keeper renews on the new primary
        wait_until(lambda: held.state is sr.PermitState.HELD, timeout=10)
        assert waiter.is_alive() and not got  # (still waiting: nothing was released)
        with _admin(new.port) as admin:
            assert len(live_redis_entries(admin, prefix, "f")) == 2

        held.release()
        waiter.join(10)
        assert got and got[0].token > held.token
        got[0].release()
        assert first.session_state is sr.SessionState.CONNECTED


def test_a_demoted_primary_sends_clients_to_the_new_one(
    sentinel_set: RedisSentinelSet, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``SENTINEL FAILOVER``: the old primary lives on as a replica; the sentinels
    close its clients' connections (``CLIENT KILL`` after the ``REPLICAOF``), and the
    reconnects (the notifier's, the keeper's, the release's) find the new primary,
    with no error logged."""
    url = sentinel_set.url(f"prefix={prefix}&session_timeout=10")
    with sr.connect(url) as first, sr.connect(url) as second:
        held = first.semaphore("g", capacity=1).acquire(timeout=5)
        waiting = second.semaphore("g", capacity=1)
        got: list[sr.Permit] = []
        waiter = threading.Thread(target=lambda: got.append(waiting.acquire(timeout=30)))
        waiter.start()
        wait_until(lambda: len(waiting.status().waiters) == 1, timeout=5)
        wait_until(sentinel_set.replicated, timeout=5)
        old = sentinel_set.primary()
        assert sentinel_set.sentinels[0].command_reply(b"SENTINEL FAILOVER mymaster") == "+OK"
        sentinel_set.wait_for_new_primary(old)
        held.release()  # (a write: READONLY on the old primary, then the new one)
        waiter.join(15)
        assert got and got[0].token > held.token
        got[0].release()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


def test_a_promoted_replica_that_lacks_writes_ends_the_backend(prefix: str) -> None:
    # replication through a proxy: a blackhole is lag that the failover makes final
    # (a paused replica would still read what the kernel buffered for it)
    sentinel_set = RedisSentinelSet(failover_timeout_ms=60_000)
    proxy = FaultProxy(sentinel_set.nodes[0].host_port).start()
    sentinel_set.nodes[1].replica_of = proxy.address
    with proxy, sentinel_set.start():
        url = sentinel_set.url(f"prefix={prefix}&session_timeout=10")
        with sr.connect(url) as backend:
            sem = backend.semaphore("h", capacity=1)
            first = sem.acquire(timeout=5)  # (the lease and this grant are replicated)
            wait_until(sentinel_set.replicated, timeout=5)
            proxy.blackhole()
            first.release()
            for _ in range(3):  # grants the replica never gets: the counter moves on
                sem.acquire(timeout=5).release()
            held = sem.acquire(timeout=5)
            assert held.token > first.token + 3

            old = sentinel_set.kill_primary()
            sentinel_set.wait_for_new_primary(old)
            wait_until(lambda: held.state is sr.PermitState.LOST, timeout=15)
            with pytest.raises(sr.StoreHistoryReset, match="lower than"):
                sem.acquire(timeout=5)


@dataclass
class Record:
    """One client's view of the run: its holds, and the errors it met."""

    holds: list[tuple[float, float, int, str]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    ended: str | None = None  # StoreHistoryReset: the backend is over

    def error(self, exc: BaseException) -> None:
        self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1


CAPACITY = 2
HOLD = 0.005


def _thread_client(url: str, stop: threading.Event, record: Record) -> None:
    with sr.connect(url) as backend:
        sem = backend.semaphore("load", capacity=CAPACITY)
        while not stop.is_set():
            try:
                permit = sem.acquire(timeout=3)
            except sr.StoreHistoryReset as exc:
                record.ended = str(exc)
                return
            except (sr.AcquireTimeout, sr.BackendUnavailable) as exc:
                record.error(exc)
                continue
            start = time.monotonic()
            time.sleep(HOLD)
            state = permit.state.value
            end = time.monotonic()
            try:
                permit.release()
            except sr.SemaphoreError as exc:
                record.error(exc)
            record.holds.append((start, end, permit.token, state))


async def _async_client(url: str, stop: threading.Event, record: Record) -> None:
    async with sr.aio.connect(url) as backend:
        sem = backend.semaphore("load", capacity=CAPACITY)
        while not stop.is_set():
            try:
                permit = await sem.acquire(timeout=3)
            except sr.StoreHistoryReset as exc:
                record.ended = str(exc)
                return
            except (sr.AcquireTimeout, sr.BackendUnavailable) as exc:
                record.error(exc)
                continue
            start = time.monotonic()
            await asyncio.sleep(HOLD)
            state = permit.state.value
            end = time.monotonic()
            try:
                await permit.release()
            except sr.SemaphoreError as exc:
                record.error(exc)
            record.holds.append((start, end, permit.token, state))


def _most_held_at_once(holds: list[tuple[float, float, int, str]]) -> int:
    """The most holds whose client-side spans overlap (a span is inside the server's:
    acquire returned after the grant, release starts before the removal)."""
    events = sorted([(start, 1) for start, *_ in holds] + [(end, -1) for _, end, *_ in holds])
    now = most = 0
    for _, delta in events:
        now += delta
        most = max(most, now)
    return most


@pytest.mark.parametrize("wait_replicas", [0, 1])
def test_clients_carry_on_through_a_failover_under_load(
    sentinel_set: RedisSentinelSet, prefix: str, wait_replicas: int
) -> None:
    url = sentinel_set.url(
        f"prefix={prefix}&session_timeout=10&request_timeout=2&wait_replicas={wait_replicas}"
    )
    stop = threading.Event()
    records = [Record() for _ in range(5)]
    clients = [
        threading.Thread(target=_thread_client, args=(url, stop, record)) for record in records[:4]
    ]
    clients.append(
        threading.Thread(target=lambda: asyncio.run(_async_client(url, stop, records[4])))
    )
    for client in clients:
        client.start()
    try:
        time.sleep(1.5)
        killed_at = time.monotonic()
        old = sentinel_set.kill_primary()
        new = sentinel_set.wait_for_new_primary(old)
        failed_over = time.monotonic()
        with _admin(new.port) as admin:  # (every token the new primary hands out is above)
            counter_at_failover = int(admin.get(f"{prefix}:seq") or 0)
        time.sleep(1.0)
        rejoining = time.monotonic()
        sentinel_set.rejoin(old)  # (restarted empty, as a replica of the new primary)
        rejoined = time.monotonic()
        time.sleep(3.0)
        with sr.connect(url) as looking:  # what the new primary holds, mid-load
            held_there = sum(e.permits for e in looking.status("load").holders)
    finally:
        stop.set()
        for client in clients:
            client.join(30)
    holds = [hold for record in records for hold in record.holds]
    # with wait_replicas=1 nothing is granted while the new primary has no replica
    goes_on = rejoined if wait_replicas else failed_over
    after = [hold for hold in holds if hold[0] > goes_on]
    # (an acquire granted and replicated before the kill may return after it: its
    # token is one the new primary had; a grant of the new primary's is above)
    alone = [h for h in holds if failed_over < h[0] < rejoining and h[2] > counter_at_failover]
    sound = [hold for hold in holds if hold[3] != "lost"]
    ended = sum(record.ended is not None for record in records)
    print(
        f"\nwait_replicas={wait_replicas}: failover {failed_over - killed_at:.2f} s, "
        f"{len(holds)} holds ({len(after)} after it, {len(alone)} while the new primary "
        f"had no replica), most at once "
        f"{_most_held_at_once(holds)} (of not lost: {_most_held_at_once(sound)}), "
        f"lost {len(holds) - len(sound)}, ended by StoreHistoryReset {ended}/5, "
        f"errors {[r.errors for r in records]}, entries on the new primary {held_there}"
    )
    assert not any(client.is_alive() for client in clients)
    # every client either goes on after the failover or is told its store went back
    for record in records:
        assert record.ended is not None or any(h[0] > goes_on for h in record.holds)
        assert record.ended is None or "lower than" in record.ended
    assert held_there <= CAPACITY
    if wait_replicas:
        assert alone == []  # (every grant refused: no replica acknowledged it)
        # each grant reached the replica before acquire returned: the new primary has
        # every one, so no two clients held beyond the capacity at once
        assert _most_held_at_once(sound) <= CAPACITY
    with _admin(new.port) as admin:
        assert live_redis_entries(admin, prefix) == []
