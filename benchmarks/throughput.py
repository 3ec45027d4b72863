"""Throughput: capacity 10, 50 clients (a session each) in 5 processes, acquire->release
loops for 10 s; grants per second, Jain's fairness index over the clients' grants, and
the cost of a grant: the client processes' CPU time, the server's requests and bytes,
against the raw create+delete (put+delete) loop run by the same clients and processes,
and against the ceiling: the requests of a contended herd-free acquire without its
waiting (``impls.HerdFreeCeiling``, ``impls.EtcdCeiling``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .config import Run
from .impls import IMPLS, now_ns
from .latency import IN_OUT
from .procs import WorkerError, Workers
from .results import Results, ThroughputRow, jain
from .servers import BYTES_IN_OUT, ServerSet

TP_IMPLS = (
    "raw-zk",
    "ceiling-zk",
    "ours-zk",
    "kazoo-sem",
    "raw-etcd",
    "ceiling-etcd",
    "ours-etcd",
)
HELD_IMPLS = ("ours-zk", "kazoo-sem", "ours-etcd")
RAW = {"zookeeper": "raw-zk", "etcd": "raw-etcd"}


def one(
    run: Run,
    servers: ServerSet,
    impl: str,
    processes: int,
    clients: int,
    hold_ms: float = 0.0,
) -> ThroughputRow:
    sizes = run.sizes
    backend, label = IMPLS[impl]
    name = f"tp-{impl}" if not hold_ms else f"tp-held-{impl}"
    target = run.target.with_name(name, capacity=sizes.capacity)
    with Workers(run.work_dir, sizes.worker_max_seconds) as workers:
        procs = [
            workers.start(
                f"{name}-{p}",
                "throughput",
                impl,
                target,
                clients=clients,
                hold_ms=hold_ms,
            )
            for p in range(processes)
        ]
        for proc in procs:
            proc.expect("READY", 180)
        key_in = IN_OUT[backend][0]
        before = servers.counters(backend)
        start = now_ns() + 300_000_000
        end = start + int(sizes.throughput_seconds * 1e9)
        for proc in procs:
            proc.send(f"go {start} {end}")
        counts: list[int] = []
        cpu = 0.0
        for proc in procs:
            counts += json.loads(proc.expect("COUNTS", sizes.throughput_seconds + 120))
            cpu += float(proc.expect("CPU", 60))
        after = servers.counters(backend)
        for proc in procs:
            proc.finish()
    grants = sum(counts)
    bytes_in, bytes_out = BYTES_IN_OUT[backend]

    def per_grant(counter: str) -> float:
        if not grants:
            return float("nan")
        return (after[counter] - before[counter]) / grants

    return ThroughputRow(
        backend,
        impl,
        label,
        clients=len(counts),
        processes=len(procs),
        seconds=sizes.throughput_seconds,
        grants=grants,
        ops_per_s=grants / sizes.throughput_seconds,
        jain=jain(counts),
        requests=per_grant(key_in),
        hold_ms=hold_ms,
        cpu_us=cpu / grants * 1e6 if grants else float("nan"),
        bytes_in=per_grant(bytes_in),
        bytes_out=per_grant(bytes_out),
    )


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    sizes = run.sizes
    rows = {}
    for impl in TP_IMPLS:
        progress(f"throughput: {IMPLS[impl][1]} on {IMPLS[impl][0]}")
        try:
            rows[impl] = one(
                run, servers, impl, sizes.throughput_processes, sizes.throughput_clients
            )
        except (WorkerError, OSError, ValueError) as exc:
            results.errors.append((f"throughput: {IMPLS[impl][1]}", str(exc)))
    for row in rows.values():
        raw = rows.get(RAW[row.backend])
        if raw is not None and raw.ops_per_s:
            row.ratio = row.ops_per_s / raw.ops_per_s
        results.throughput.append(row)
    for impl in HELD_IMPLS:
        what = f"throughput with a {sizes.held_ms:g} ms hold: {IMPLS[impl][1]}"
        progress(f"{what} on {IMPLS[impl][0]}")
        try:
            results.held.append(
                one(run, servers, impl, sizes.held_processes, sizes.held_clients, sizes.held_ms)
            )
        except (WorkerError, OSError, ValueError) as exc:
            results.errors.append((what, str(exc)))
