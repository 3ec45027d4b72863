"""Herd: the server's work per release with W blocked waiters (capacity 2).

The approach of ``tests/herd.py``: W waiters in worker processes of 50 threads (one
session per process), two holders here. Permits are handed off one at a time (a holder
releases, the next waiter is granted and then holds until told to release), first W/2
times to reach the middle of the queue, where every waiter listed many entries long
gone by its turn, then HANDOFFS times while the server's own counters are read. The
cost of reading the counters is measured and taken off.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import Run
from .impls import IMPLS, KazooSemaphore, OursClient
from .procs import WorkerError, Workers
from .results import HerdRow, Results
from .servers import ServerSet

HERD_IMPLS = ("ours-zk", "kazoo-sem", "ours-etcd")
PER_PROCESS = 50


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"herd: {what} not reached within {timeout:g} s")
        time.sleep(0.002)


def one(run: Run, servers: ServerSet, impl: str, waiters: int) -> HerdRow:
    backend, label = IMPLS[impl]
    # as many measured handoffs as asked, but leave a quarter of a small queue to reach
    # the middle first
    handoffs = min(run.sizes.herd_handoffs, waiters - 2 - waiters // 4)
    target = run.target.with_name(f"herd-{impl}-{waiters}", capacity=2)
    order = run.work_dir / f"herd-{impl}-{waiters}.order"
    releases = run.work_dir / f"herd-{impl}-{waiters}.release"
    order.write_text("")
    releases.write_text("")
    holders: list[Any] = []
    try:
        for _ in range(2):
            holder: Any = (
                KazooSemaphore(target) if impl == "kazoo-sem" else OursClient(target, backend)
            )
            holders.append(holder)
            holder.acquire()
        with Workers(run.work_dir, run.sizes.worker_max_seconds) as workers:
            procs = []
            for p in range(math.ceil(waiters / PER_PROCESS)):
                n = min(PER_PROCESS, waiters - PER_PROCESS * p)
                procs.append(
                    workers.start(
                        f"herd-{impl}-{waiters}-{p}",
                        "herd",
                        impl,
                        target,
                        threads=n,
                        order_file=str(order),
                        release_file=str(releases),
                    )
                )
            for proc in procs:
                proc.expect("STARTED", 120)
            wait_until(lambda: holders[0].queued() == waiters, 180, f"{waiters} waiters queued")
            row = measure_handoffs(
                servers, backend, impl, label, waiters, handoffs, holders, order, releases
            )
            for proc in procs:
                proc.finish()  # closes its session: its entries go at once
            return row
    finally:
        for holder in holders:
            holder.close()


def measure_handoffs(
    servers: ServerSet,
    backend: str,
    impl: str,
    label: str,
    waiters: int,
    handoffs: int,
    holders: list[Any],
    order: Path,
    releases: Path,
) -> HerdRow:
    def grants() -> int:
        return len(order.read_text().split())

    def hand_off() -> None:
        expected = grants() + 1
        with releases.open("a") as f:
            f.write("go\n")
        wait_until(lambda: grants() >= expected, 60, f"grant {expected}")

    def read() -> dict[str, float]:
        return servers.counters(backend)

    for h in holders:
        h.release()
    wait_until(lambda: grants() == 2, 60, "the first two grants")
    for _ in range(min(waiters // 2, waiters - handoffs - 2)):
        hand_off()
    first = read()
    calib = {k: v - first[k] for k, v in read().items()}
    before = read()
    for _ in range(handoffs):
        hand_off()
    after = read()
    per_release = {k: (after[k] - before[k] - calib[k]) / handoffs for k in before}
    return HerdRow(backend, impl, label, waiters, handoffs, per_release)


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    for waiters in run.sizes.herd_waiters:
        if waiters < 4:
            raise ValueError(f"herd: W={waiters} is too small (at least 4)")
        for impl in HERD_IMPLS:
            progress(f"herd: {IMPLS[impl][1]} on {IMPLS[impl][0]}, W={waiters}")
            try:
                results.herd.append(one(run, servers, impl, waiters))
            except (WorkerError, TimeoutError, OSError) as exc:
                results.errors.append((f"herd: {IMPLS[impl][1]} W={waiters}", str(exc)))
