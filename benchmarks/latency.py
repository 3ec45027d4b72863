"""Uncontended acquire+release latency, every implementation in a worker of its own.

All workers connect first; then, round after round, each runs one batch of cycles in
turn while the others idle, so slow drift of the machine touches every implementation
alike. The server's request counters are read around every batch: requests (ZooKeeper
packets received / etcd gRPC messages received) per cycle count the round trips.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence

from .config import Run
from .impls import IMPLS
from .peers import PURE
from .procs import Interpreter, Worker, WorkerError, Workers
from .results import LatencyRow, Results, median, percentile
from .servers import ServerSet

ZK = ("raw-zk", "ours-zk", "kazoo-sem", "kazoo-lock")
ETCD = ("raw-etcd", "raw-etcd-txn", "ours-etcd", "etcd3-lock", "raw-etcd-purepb")
FLOOR = {"zookeeper": "raw-zk", "etcd": "raw-etcd"}
IN_OUT = {
    "zookeeper": ("zk_packets_received", "zk_packets_sent"),
    "etcd": ("grpc_server_msg_received_total", "grpc_server_msg_sent_total"),
}


def interpreter(run: Run, impl: str, results: Results, what: str) -> Interpreter | None:
    """The interpreter for ``impl``, or None (and a skip note) when it cannot run."""
    if impl == "etcd3-lock":
        if run.etcd3 is None:
            results.skip(f"{what}: python-etcd3 Lock", run.etcd3_why)
        return run.etcd3
    if impl == "raw-etcd-purepb":
        if run.etcd3 is None:
            return None  # only a control for the python-etcd3 row
        results.notes.append(
            f"{what}: the row '{IMPLS[impl][1]}' is the etcd floor run with pure-Python "
            "protobuf, the handicap python-etcd3 runs under here"
        )
        return Interpreter(sys.executable, dict(PURE))
    return Interpreter()


def cost_of_reading(read: Callable[[], dict[str, float]]) -> dict[str, float]:
    """What one counter read itself adds to the counters (ZooKeeper's mntr is a request)."""
    first = read()
    second = read()
    return {k: second[k] - first[k] for k in first}


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    floors = {impl: FLOOR[IMPLS[impl][0]] for impl in ZK + ETCD}
    results.latency += batches(run, servers, results, progress, ZK + ETCD, floors)


def batches(
    run: Run,
    servers: ServerSet,
    results: Results,
    progress: Callable[[str], None],
    impls: Sequence[str],
    floors: Mapping[str, str],
    mode: str = "latency",
) -> list[LatencyRow]:
    """Rows of ``impls`` measured batch by batch in turn by workers of ``mode``; each
    row's ratio is to its floor's row (``floors[impl]``), when that one ran."""
    sizes = run.sizes
    with Workers(run.work_dir, sizes.worker_max_seconds) as workers:
        started: dict[str, Worker] = {}
        for impl in impls:
            interp = interpreter(run, impl, results, mode)
            if interp is not None:
                target = run.target.with_name(f"lat-{impl}")
                started[impl] = workers.start(f"{mode}-{impl}", mode, impl, target, interp)
        active: dict[str, Worker] = {}
        for impl, worker in started.items():
            try:
                worker.expect("READY", 120)
                worker.send(f"run {sizes.latency_warmup}")
                worker.expect("SAMPLES", 120)
                active[impl] = worker
            except WorkerError as exc:
                results.errors.append((f"{mode}: {IMPLS[impl][1]}", str(exc)))
        counted = {IMPLS[impl][0] for impl in active} & set(IN_OUT)
        calib = {b: cost_of_reading(functools.partial(servers.counters, b)) for b in counted}
        samples: dict[str, list[int]] = {impl: [] for impl in active}
        traffic: dict[str, list[float]] = {impl: [0.0, 0.0] for impl in active}
        for r in range(sizes.latency_rounds):
            progress(f"{mode}: round {r + 1}/{sizes.latency_rounds}")
            order = list(active)
            order = order[r % len(order) :] + order[: r % len(order)]
            for impl in order:
                backend = IMPLS[impl][0]
                before = servers.counters(backend) if backend in counted else {}
                try:
                    active[impl].send(f"run {sizes.latency_batch}")
                    batch = json.loads(active[impl].expect("SAMPLES", 300))
                except WorkerError as exc:
                    results.errors.append((f"{mode}: {IMPLS[impl][1]}", str(exc)))
                    del active[impl]
                    continue
                samples[impl] += batch
                if backend in counted:
                    after = servers.counters(backend)
                    key_in, key_out = IN_OUT[backend]
                    traffic[impl][0] += after[key_in] - before[key_in] - calib[backend][key_in]
                    traffic[impl][1] += after[key_out] - before[key_out] - calib[backend][key_out]
                else:
                    traffic[impl] = [math.nan, math.nan]
        for worker in active.values():
            worker.send("quit")
            worker.finish()
    rows = {}
    for impl in active:
        backend, label = IMPLS[impl]
        ms = [s / 1e6 for s in samples[impl]]
        rows[impl] = LatencyRow(
            backend,
            impl,
            label,
            len(ms),
            median(ms),
            percentile(ms, 99),
            requests=traffic[impl][0] / len(ms),
            replies=traffic[impl][1] / len(ms),
        )
    for row in rows.values():
        floor = rows.get(floors.get(row.impl, ""))
        if floor is not None:
            row.ratio = row.median_ms / floor.median_ms
    return list(rows.values())
