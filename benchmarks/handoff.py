"""Handoff latency: a holder releases, a waiter in another process returns from acquire.

Capacity 1 everywhere (python-etcd3 and kazoo's Lock are mutexes). Each sample: the
holder process acquires; the waiter process starts its acquire and blocks; after a
settle time (its watches are set) the holder notes the clock and releases; the waiter
notes the clock when its acquire returns. Both clocks are CLOCK_MONOTONIC, one machine.

The floor: the holder deletes a key, the waiter's watch callback on that key fires
(ZooKeeper: an ``exists`` watch through kazoo; etcd: a watch through the library's gRPC
layer). Implementations take turns sample by sample, so drift touches all alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from .config import Run
from .impls import IMPLS
from .latency import interpreter
from .procs import Worker, WorkerError, Workers
from .results import LatencyRow, Results, median, percentile
from .servers import ServerSet

IMPLS_HERE = ("floor-zk", "ours-zk", "kazoo-sem", "kazoo-lock", "floor-etcd", "ours-etcd")
PEERS = ("etcd3-lock",)
FLOOR = {"zookeeper": "floor-zk", "etcd": "floor-etcd"}
WARMUP = 2


def one(holder: Worker, waiter: Worker, i: int, settle: float) -> int:
    holder.send(f"hold {i}")
    holder.expect("HELD")
    waiter.send(f"wait {i}")
    waiter.expect("WAITING")
    time.sleep(settle)
    holder.send(f"release {i}")
    t0 = int(holder.expect("T0"))
    t1 = int(waiter.expect("GOT"))
    waiter.send(f"release {i}")
    waiter.expect("RELEASED")
    return t1 - t0


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    floors = {impl: FLOOR[IMPLS[impl][0]] for impl in IMPLS_HERE + PEERS}
    results.handoff += handoffs(run, results, progress, IMPLS_HERE + PEERS, floors)


def handoffs(
    run: Run,
    results: Results,
    progress: Callable[[str], None],
    impls: Sequence[str],
    floors: Mapping[str, str],
    mode: str = "handoff",
) -> list[LatencyRow]:
    """Rows of ``impls``, a holder and a waiter worker of ``mode`` each, taking turns
    sample by sample; each row's ratio is to its floor's row (``floors[impl]``)."""
    sizes = run.sizes
    pairs: dict[str, tuple[Worker, Worker]] = {}
    with Workers(run.work_dir, sizes.worker_max_seconds) as workers:
        for impl in impls:
            interp = interpreter(run, impl, results, mode)
            if interp is None:
                continue
            if impl == "etcd3-lock" and run.etcd3_wait_broken:
                results.skip("handoff: python-etcd3 Lock", run.etcd3_wait_broken)
                continue
            target = run.target.with_name(f"{mode}-{impl}", capacity=1)
            pairs[impl] = (
                workers.start(f"{mode}-{impl}-holder", mode, impl, target, interp, role="holder"),
                workers.start(f"{mode}-{impl}-waiter", mode, impl, target, interp, role="waiter"),
            )
        samples: dict[str, list[int]] = {}
        for impl, (holder, waiter) in pairs.items():
            try:
                holder.expect("READY", 120)
                waiter.expect("READY", 120)
                for i in range(WARMUP):
                    one(holder, waiter, -1 - i, sizes.handoff_settle)
                samples[impl] = []
            except WorkerError as exc:
                results.errors.append((f"{mode}: {IMPLS[impl][1]}", str(exc)))
        for i in range(sizes.handoff_samples):
            if i % max(1, sizes.handoff_samples // 5) == 0:
                progress(f"{mode}: sample {i + 1}/{sizes.handoff_samples}")
            for impl in list(samples):
                holder, waiter = pairs[impl]
                try:
                    samples[impl].append(one(holder, waiter, i, sizes.handoff_settle))
                except WorkerError as exc:
                    results.errors.append((f"{mode}: {IMPLS[impl][1]}", str(exc)))
                    del samples[impl]
        for impl in samples:
            for worker in pairs[impl]:
                worker.finish()
    rows = {}
    for impl, ns in samples.items():
        backend, label = IMPLS[impl]
        ms = [s / 1e6 for s in ns]
        rows[impl] = LatencyRow(backend, impl, label, len(ms), median(ms), percentile(ms, 99))
    for row in rows.values():
        floor = rows.get(floors.get(row.impl, ""))
        if floor is not None:
            row.ratio = row.median_ms / floor.median_ms
    return list(rows.values())
