"""How much each measurement does: the full run, and ``--tiny`` (CI: well under a minute)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .impls import Target
from .procs import Interpreter


@dataclass(frozen=True)
class Sizes:
    latency_rounds: int  # rounds; in each, every implementation runs one batch in turn
    latency_batch: int
    latency_warmup: int
    handoff_samples: int
    handoff_settle: float  # seconds between the waiter blocking and the release
    herd_waiters: tuple[int, ...]
    server_herd_waiters: tuple[int, ...]  # herd of backends in this process (PostgreSQL)
    herd_handoffs: int  # handoffs measured at mid-queue (after W/2 to get there)
    throughput_processes: int
    throughput_clients: int  # per process
    throughput_seconds: float
    held_processes: int  # throughput with a hold time: how many permits are in use
    held_clients: int  # per process
    held_ms: float
    capacity: int  # uncontended and throughput
    aio_waiters: tuple[int, ...]  # concurrent acquiring tasks in one loop (capacity 10)
    aio_hold_ms: float  # how long each of them holds its permit
    scale_waiters: tuple[int, ...]  # W over several processes (benchmarks.scale)
    aio_rss_limit_mb: int  # a waiters' process stops there (the figure then says so)
    worker_max_seconds: float  # every worker stops by itself after this
    scale_stores: tuple[str, ...] = ("zookeeper", "etcd", "redis")
    scale_drain_s: float | None = None  # a scale drain stops after this (None: its bound)


FULL = Sizes(
    latency_rounds=10,
    latency_batch=200,
    latency_warmup=300,
    handoff_samples=200,
    handoff_settle=0.03,
    herd_waiters=(10, 100, 500),
    server_herd_waiters=(10, 100, 1000),
    herd_handoffs=20,
    throughput_processes=5,
    throughput_clients=10,
    throughput_seconds=10.0,
    held_processes=4,
    held_clients=4,
    held_ms=10.0,
    capacity=10,
    aio_waiters=(100, 1000, 10000),
    aio_hold_ms=1.0,
    scale_waiters=(1000, 10_000, 100_000),
    aio_rss_limit_mb=2048,
    worker_max_seconds=900.0,
)

TINY = Sizes(
    latency_rounds=2,
    latency_batch=15,
    latency_warmup=5,
    handoff_samples=6,
    handoff_settle=0.03,
    herd_waiters=(6, 20),
    server_herd_waiters=(6, 20),
    herd_handoffs=3,
    throughput_processes=2,
    throughput_clients=3,
    throughput_seconds=1.0,
    held_processes=2,
    held_clients=3,
    held_ms=10.0,
    capacity=10,
    aio_waiters=(20, 200),
    aio_hold_ms=1.0,
    scale_waiters=(20, 200),
    aio_rss_limit_mb=512,
    worker_max_seconds=120.0,
)


@dataclass
class Run:
    """Everything a measurement needs."""

    sizes: Sizes
    tiny: bool
    target: Target
    work_dir: Path
    etcd3: Interpreter | None  # None: python-etcd3 rows are skipped (see the notes)
    etcd3_why: str
    etcd3_wait_broken: str | None = None  # why python-etcd3's Lock cannot wait, if so
