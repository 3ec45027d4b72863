"""Benchmarks of semaphore-recipes, its peers and the raw floors, in one run.

Without addresses it starts its own ZooKeeper and etcd on loopback (and stops them).
Progress goes to stderr; the markdown report to stdout and ``OUT/benchmarks.md`` (only
to stdout for ``--only`` without ``--out``: a part would replace the whole page), plots
to ``OUT/bench-latency.png`` and ``OUT/bench-herd.png``. Exit status 1 when a
measurement failed (a skip for a missing optional package is not a failure).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.metadata
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path

from . import (
    aio_handoff,
    aio_latency,
    aio_waiters,
    handoff,
    herd,
    latency,
    multi,
    mysql_bench,
    plots,
    postgresql_bench,
    redis_bench,
    report,
    scale,
    throughput,
)
from .config import FULL, TINY, Run
from .impls import RawEtcd, RawZooKeeper, Target, etcd_client, kazoo_client
from .peers import etcd3_interpreter
from .procs import ROOT, Interpreter
from .results import Results
from .servers import ServerSet, servers

MEASUREMENTS: dict[str, Callable[..., None]] = {
    "latency": latency.measure,
    "handoff": handoff.measure,
    "herd": herd.measure,
    "throughput": throughput.measure,
    "aio-latency": aio_latency.measure,
    "aio-handoff": aio_handoff.measure,
    "aio-waiters": aio_waiters.measure,
    "redis": redis_bench.measure,
    "postgresql": postgresql_bench.measure,
    "mysql": mysql_bench.measure,
    "multi": multi.measure,
    "scale": scale.measure,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="shrink every count (CI smoke run)")
    ap.add_argument(
        "--zookeeper",
        metavar="URL_OR_HOSTPORT",
        help="use this ZooKeeper (zookeeper://h:p[/chroot] or h:p) instead of "
        "starting one; mntr must be allowed for the herd figures",
    )
    ap.add_argument("--etcd", metavar="HOSTPORT", help="use this etcd instead of starting one")
    ap.add_argument(
        "--out",
        metavar="DIR",
        help="where benchmarks.md and the PNGs go (default: docs/, unless --only is given:"
        " a part of the measurements would replace the whole page, so it is only printed)",
    )
    ap.add_argument(
        "--only", metavar="NAME,...", help=f"run only these measurements: {','.join(MEASUREMENTS)}"
    )
    ap.add_argument(
        "--work-dir",
        metavar="DIR",
        help="keep worker logs (and the python-etcd3 venv, if one is built) here "
        "instead of a temporary directory removed at the end",
    )
    ap.add_argument(
        "--etcd3-venv",
        action="store_true",
        help="run python-etcd3 in a throwaway venv with protobuf<4 even if it imports here",
    )
    ap.add_argument(
        "--scale-waiters",
        metavar="W,...",
        help="the numbers of waiters of the scale measurement (default 1000,10000,100000)",
    )
    ap.add_argument(
        "--scale-stores",
        metavar="STORE,...",
        help="the stores of the scale measurement (default zookeeper,etcd,redis)",
    )
    ap.add_argument(
        "--scale-drain-s",
        type=float,
        metavar="S",
        help="stop each scale drain after S seconds (its row keeps the fill and probe "
        "figures and says how many entries were left)",
    )
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(MEASUREMENTS)
    unknown = [n for n in names if n not in MEASUREMENTS]
    if unknown:
        ap.error(
            f"unknown measurement(s) {', '.join(unknown)}; choose from {', '.join(MEASUREMENTS)}"
        )
    args.names = names
    return args


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def environment(srv: ServerSet, server_log: list[str]) -> list[str]:
    env = [
        f"Machine: {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average at the start {load()}",
        f"ZooKeeper {srv.zk_version()}, etcd {srv.etcd_version()}",
        f"semaphore-recipes {version('semaphore-recipes')}, kazoo {version('kazoo')}, "
        f"grpcio {version('grpcio')}, protobuf {version('protobuf')}, "
        f"python-etcd3 {version('etcd3')}, matplotlib {version('matplotlib')}",
    ]
    return env + server_log


def prepare(target: Target) -> None:
    """Make the run's ZooKeeper chroot (the clients expect it)."""
    client = kazoo_client(Target(target.zk_hosts, "", "", "", "", 1))
    try:
        client.ensure_path(target.zk_chroot)
    finally:
        client.stop()
        client.close()


def warm_up(target: Target, seconds: float) -> None:
    """Raw traffic on both servers first, so no implementation pays for the JVM's JIT."""
    for client in (RawZooKeeper(target), RawEtcd(target)):
        try:
            end = time.monotonic() + seconds / 2
            while time.monotonic() < end:
                client.acquire()
                client.release()
        finally:
            client.close()


def cleanup(target: Target) -> None:
    """Remove what the run left in the servers (persistent semaphore nodes, config keys)."""
    with contextlib.suppress(Exception):
        client = kazoo_client(Target(target.zk_hosts, "", "", "", "", 1))
        try:
            client.delete(target.zk_chroot, recursive=True)
        finally:
            client.stop()
            client.close()
    with contextlib.suppress(Exception):
        from semaphore_recipes.etcd.ops import prefix_range_end

        etcd = etcd_client(target)
        try:
            prefix = target.etcd_prefix.encode()
            etcd.delete_range(prefix, prefix_range_end(prefix))
        finally:
            etcd.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    sizes = TINY if args.tiny else FULL
    if args.scale_waiters:
        waiters = tuple(int(w) for w in args.scale_waiters.split(","))
        sizes = dataclasses.replace(sizes, scale_waiters=waiters)
    if args.scale_drain_s:
        sizes = dataclasses.replace(sizes, scale_drain_s=args.scale_drain_s)
    if args.scale_stores:
        sizes = dataclasses.replace(sizes, scale_stores=tuple(args.scale_stores.split(",")))
    out = Path(args.out) if args.out else None if args.only else ROOT / "docs"
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    work_dir = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="sr-bench-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    results = Results()
    server_log: list[str] = []
    env: list[str] = []
    command = "python -m benchmarks" + "".join(
        f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])
    )
    try:
        with servers(args.zookeeper, args.etcd, server_log) as srv:
            env = environment(srv, server_log)
            run_id = uuid.uuid4().hex[:8]
            target = Target(
                zk_hosts=srv.zk_hosts,
                zk_chroot=f"{srv.zk_chroot}/sr-bench-{run_id}",
                etcd_endpoint=srv.etcd_endpoint,
                etcd_prefix=f"/sr-bench-{run_id}/",
                name="bench",
                capacity=sizes.capacity,
            )
            prepare(target)
            progress("warming the servers up")
            warm_up(target.with_name("warm-up"), 0.5 if args.tiny else 5.0)
            interp: Interpreter | None = None
            why, wait_broken = "not needed by the measurements run", None
            if {"latency", "handoff"} & set(args.names):
                progress("checking where python-etcd3 can run")
                interp, why, wait_broken = etcd3_interpreter(
                    work_dir, allow_venv=not args.tiny, force_venv=args.etcd3_venv
                )
                if interp is not None:
                    results.notes.append(why)
            run = Run(sizes, args.tiny, target, work_dir, interp, why, wait_broken)
            try:
                for name in args.names:
                    progress(f"{name}: starting")
                    t0 = time.monotonic()
                    try:
                        MEASUREMENTS[name](run, srv, results, progress)
                    except Exception as exc:
                        traceback.print_exc()
                        results.errors.append((name, f"{type(exc).__name__}: {exc}"))
                    progress(f"{name}: done in {time.monotonic() - t0:.1f} s")
            finally:
                cleanup(target)
    finally:
        if not args.work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    if out is not None:
        plots.write(results, out)
    elapsed = time.monotonic() - started
    results.notes.append(f"Total run time: {elapsed:.0f} s; load average at the end {load()}.")
    text = report.render(results, env, command, args.tiny, sizes.capacity)
    if out is not None:
        (out / "benchmarks.md").write_text(text + "\n")
    print(text)
    for what, why in results.errors:
        print(f"ERROR {what}: {why}", file=sys.stderr)
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
