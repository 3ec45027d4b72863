"""Redis Cluster: the primary serving a semaphore's slot is killed under load.

Clients cycle (acquire, hold a few ms, release) on one semaphore from three backends
while the primary of its slot is SIGKILLed; a replica takes the slot over after the
node timeout. The clients carry on (calls in flight fail and are sent again within
their bounds; waiters are told as on a reconnect), and the count of permits held at
once never exceeds the capacity among permits not reported LOST. What a failover can
lose (asynchronous replication: grants the old primary acknowledged and had not
passed on) ends the backend that saw them with StoreHistoryReset, its permits LOST:
the thread then opens a new backend, as a user would."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import semaphore_recipes as sr
from semaphore_recipes.testing.redis_harness import RedisClusterHarness

CAPACITY = 2
NAME = "failover"


@dataclass
class Held:
    start: float
    end: float
    lost: bool


@dataclass
class Cycler:
    harness: RedisClusterHarness
    stop: threading.Event
    held: list[Held] = field(default_factory=list)
    resets: int = 0
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        backend = self.harness.connect()
        while not self.stop.is_set():
            try:
                permit = backend.semaphore(NAME, capacity=CAPACITY).acquire(timeout=20)
            except sr.StoreHistoryReset:
                self.resets += 1
                backend = self.harness.connect()
                continue
            except sr.SemaphoreError as exc:  # (a bound passed meanwhile: try again)
                self.errors.append(repr(exc))
                continue
            start = time.monotonic()
            time.sleep(0.005)
            end = time.monotonic()
            permit.release()
            self.held.append(Held(start, end, permit.lost.is_set()))


def _most_held_at_once(held: list[Held]) -> int:
    events = sorted([(h.start, 1) for h in held] + [(h.end, -1) for h in held])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_a_primary_killed_under_load_the_clients_carry_on_and_never_over_admit(
    redis_cluster_harness: RedisClusterHarness,
) -> None:
    cluster = redis_cluster_harness.cluster
    key = f"{redis_cluster_harness.prefix}:{{{NAME}}}:seq"
    stop = threading.Event()
    cyclers = [Cycler(redis_cluster_harness, stop) for _ in range(3)]
    threads = [threading.Thread(target=c.run) for c in cyclers]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    old = cluster.kill_primary_of(key)
    try:
        cluster.wait_for_failover(key, old)
        failed_over = time.monotonic()
        time.sleep(3.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        old.start()  # it rejoins as a replica of the promoted one
        cluster.wait_for_failover(key, old)
    kept = [h for c in cyclers for h in c.held if not h.lost]
    assert _most_held_at_once(kept) <= CAPACITY
    for cycler in cyclers:  # every client granted again after the failover
        assert any(h.start > failed_over for h in cycler.held), cycler.errors[-3:]
    print(
        f"grants {sum(len(c.held) for c in cyclers)}, lost "
        f"{sum(h.lost for c in cyclers for h in c.held)}, history resets "
        f"{sum(c.resets for c in cyclers)}, errors {sum(len(c.errors) for c in cyclers)}"
    )
