"""``python -m chaos [--backend zookeeper|etcd|redis|redis-sentinel|postgresql|mysql|both]
[--minutes M] [--seed S] [--storm] [--wait-replicas N]`` (``--recheck RUNDIR`` checks a
kept run directory again).

Faults come one at a time (chaos/nemesis.py) or, with ``--storm``, overlapping on
different client slots (chaos/storm.py).

Runs chaos runs of ``--run-seconds`` each until ``--minutes`` have passed (at least one
run per backend), then prints the soak table. Exit status 1 if any run found a
violation. Ctrl-C or SIGTERM stops every child process (servers, clients, proxies).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType

from .checker import CheckParams, check
from .leaders import spontaneous
from .runner import RunConfig, RunReport, fault_kinds, load_run, run_once

CLIENTS = 5
# More slots in a storm: the fault rate grows with them (one schedule per slot).
STORM_CLIENTS = 8


def _percentile(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]:.2f}"


def table(backend: str, reports: list[RunReport], elapsed: float, mode: str) -> str:
    faults: Counter[str] = Counter()
    violations: Counter[str] = Counter()
    latencies: list[float] = []
    unexplained = 0
    lost: Counter[str] = Counter()
    for report in reports:
        lost.update(report.lost_with_primary)
        unexplained += len(report.spontaneous_leader_changes)
        faults.update(f.kind.value for f in report.faults)
        violations.update(report.result.by_kind())
        latencies += report.result.release_latencies
    rows = [
        ("backend", backend),
        ("nemesis", mode),
        ("wall time", f"{elapsed / 60:.1f} min"),
        ("runs", str(len(reports))),
        ("acquisitions", str(sum(r.acquisitions for r in reports))),
        ("fenced writes", str(sum(r.result.fenced_writes for r in reports))),
        ("faults", str(sum(faults.values()))),
        ("faults per hour of wall time", f"{sum(faults.values()) * 3600 / elapsed:.0f}"),
        *((f"  {kind}", str(faults.get(kind, 0))) for kind in fault_kinds()),
        ("spontaneous leader changes", str(unexplained)),
        *(() if backend != "redis-sentinel" else (
            ("failovers", str(sum(r.failovers for r in reports))),
            ("commands lost with a killed primary", str(sum(lost.values()))),
            *((f"  {kind}", str(n)) for kind, n in sorted(lost.items())),
        )),
        ("violations", str(sum(violations.values()))),
        *((f"  {kind}", str(n)) for kind, n in sorted(violations.items())),
        ("leaks", str(violations.get("leak", 0))),
        ("kill -9 releases measured", str(len(latencies))),
        ("release latency p50/p90/p99/max (s)", "/".join(
            _percentile(latencies, q) for q in (0.5, 0.9, 0.99, 1.0))),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    header = (
        f"| {'what':<{width}} | {'value':>{vwidth}} |\n|{'-' * (width + 2)}|{'-' * (vwidth + 2)}|"
    )
    return header + "\n" + "\n".join(f"| {n:<{width}} | {v:>{vwidth}} |" for n, v in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument(
        "--backend",
        choices=("zookeeper", "etcd", "redis", "redis-sentinel", "postgresql", "mysql", "both"),
        default="both",
    )
    parser.add_argument(
        "--wait-replicas", type=int, default=1,
        help="redis-sentinel: the clients' wait_replicas (0 shows what a failover loses)",
    )  # fmt: skip
    parser.add_argument("--minutes", type=float, default=2.0, help="total time per backend")
    parser.add_argument("--run-seconds", type=float, default=90.0, help="length of one run")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument(
        "--clients", type=int, default=None,
        help=f"client processes (default {CLIENTS}, {STORM_CLIENTS} with --storm)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep run directories")
    parser.add_argument(
        "--storm", action="store_true",
        help="overlapping client faults, one seeded schedule per client slot (chaos/storm.py)",
    )  # fmt: skip
    parser.add_argument(
        "--recheck", type=Path, metavar="RUNDIR", help="check a kept run directory again"
    )
    args = parser.parse_args(argv)
    if args.recheck is not None:
        kept = load_run(args.recheck)
        result = check(
            kept.history, kept.ops, kept.faults, CheckParams(session_timeout=args.session_timeout),
            leader_changes=kept.leader_changes,
        )  # fmt: skip
        for violation in result.violations:
            print(f"{violation.kind.value}: {violation.detail}")
        changes = kept.leader_changes
        print(f"leader changes seen: {len(changes)}, spontaneous (no injected fault): "
              f"{len(spontaneous(changes, kept.faults))}")  # fmt: skip
        print(f"{result.fenced_writes} fenced writes, {result.grants} grants, "
              f"violations {dict(result.by_kind()) or 'none'}")  # fmt: skip
        return 1 if result.violations else 0

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminated)
    clients = args.clients or (STORM_CLIENTS if args.storm else CLIENTS)
    backends = ("zookeeper", "etcd") if args.backend == "both" else (args.backend,)
    bad = False
    for backend in backends:
        started = time.time()
        reports: list[RunReport] = []
        seed = args.seed
        while not reports or time.time() - started < args.minutes * 60 - args.run_seconds / 2:
            config = RunConfig(
                backend=backend, seconds=args.run_seconds, seed=str(seed), clients=clients,
                threads=args.threads, session_timeout=args.session_timeout,
                workdir=args.workdir, keep=args.keep, storm=args.storm,
                wait_replicas=args.wait_replicas,
            )  # fmt: skip
            report = run_once(config)
            reports.append(report)
            summary = report.summary()
            print(
                f"[{backend} seed {seed}] {summary['seconds']} s: "
                f"{summary['acquisitions']} acquisitions, {summary['fenced_writes']} fenced "
                f"writes, {sum(summary['faults'].values())} faults, "
                f"{len(summary['spontaneous_leader_changes'])} spontaneous leader changes, "
                f"{summary['failovers']} failovers, lost with a primary "
                f"{summary['lost_with_primary'] or 'nothing'}, "
                f"violations "
                f"{summary['violations'] or 'none'}",
                flush=True,
            )
            bad |= bool(report.violations)
            seed += 1
        mode = "storm" if args.storm else "one fault at a time"
        print(table(backend, reports, time.time() - started, mode), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
