"""W waiters on one semaphore (capacity 10), spread over several processes (issue 28).

Per store (ZooKeeper, etcd, Redis) and W: P worker processes of W/P asyncio tasks each
(``aio_worker``'s waiters mode), every task acquiring once. The first ten granted hold
until all W entries are in the store; then one worker makes PROBES (20) acquires without
waiting, one after the other (each enqueues behind the W waiters, finds it cannot be
admitted, and leaves); then the queue drains, each task holding 1 ms.

Figures, from the server's own counters (less the cost of reading them):

* *fill*: seconds from the tasks' start to every entry in the store, and the bytes the
  server received / sent per entry made (the tasks start at once, so each process's
  enqueues share what a store lets them share);
* *probe*: bytes in / out and milliseconds (median) per acquire without waiting made
  alone at the full queue: what an enqueue costs at W when nobody shares it (such an
  acquire waits one reply at most 1 s: those that had none are counted);
* *drain*: seconds from the opening of the gate to the last release, bytes in / out per
  grant;
* FIFO: the tasks' grants, merged across processes by the machine's monotonic clock,
  against the entries' creation order (``aio_worker.fifo_lag``; below the capacity is
  FIFO, as a granted task's process may resume it a little late);
* memory: the processes' peak RSS less their RSS once connected, over W.

Redis runs on a server of its own (started here, no persistence, or
``SEMAPHORE_RECIPES_BENCH_REDIS``); ZooKeeper and etcd are the run's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .aio_waiters import Watched
from .aio_worker import fifo_lag
from .config import Run
from .latency import cost_of_reading
from .procs import WorkerError, Workers
from .redis_bench import server as redis_server
from .results import Results, median
from .servers import BYTES_IN_OUT, ServerSet

CAPACITY = 10
PROBES = 20
SETTLE = 0.5  # seconds between two looks at an idle server
IDLE_BYTES = 8192  # what an idle server may receive and send meanwhile (reads, renewals)
POLL = 0.05  # seconds between two counts of the entries on the server
STALLED = 90.0  # seconds without a new entry that stop a fill (leases lost, say)
IMPL = {"zookeeper": "aio-ours-zk", "etcd": "aio-ours-etcd", "redis": "aio-ours-redis"}
LABEL = {"zookeeper": "ZooKeeper", "etcd": "etcd", "redis": "Redis"}
REDIS_IN_OUT = ("total_net_input_bytes", "total_net_output_bytes")


@dataclass
class ScaleRow:
    store: str
    waiters: int
    processes: int
    fill_s: float = float("nan")
    fill_in: float = float("nan")  # bytes the server received per entry made
    fill_out: float = float("nan")
    probe_in: float = float("nan")  # per acquire made alone at the full queue
    probe_out: float = float("nan")
    probe_ms: float = float("nan")
    probes_unanswered: int = 0  # no answer within the one reply a non-waiting acquire gets
    drain_s: float = float("nan")
    drain_in: float = float("nan")  # per grant
    drain_out: float = float("nan")
    grants: int = 0
    lag: int = -1
    rss_per_waiter_kb: float = float("nan")
    aborted: str = ""
    drain_stopped: str = ""  # the drain was cut (fill and probe figures kept): how far


class Store:
    """One store's counters and entry count, read by the orchestrator."""

    def __init__(self, name: str, servers: ServerSet, redis_admin: Any = None) -> None:
        self.name = name
        self.servers = servers
        self.redis = redis_admin
        self.key_in, self.key_out = REDIS_IN_OUT if name == "redis" else BYTES_IN_OUT[name]

    def counters(self) -> dict[str, float]:
        if self.name == "redis":
            stats = self.redis.info("stats")
            return {k: float(stats[k]) for k in REDIS_IN_OUT}
        return self.servers.counters(self.name)

    def entries(self, queue_key: str) -> int:
        if self.name == "redis":
            return int(self.redis.zcard(queue_key))
        return self.servers.entries(self.name)


def settle(store: Store, watched: list[Watched], bound: float) -> int:
    """Wait until the server is idle: what the waiters asked while enqueuing has been
    answered (their reads and watches may trail the last entry by seconds), so the
    probes measure themselves. Idle: twice in a row, the bytes it received and sent in
    half a second are about its counters' reads and the leases' renewals.
    -> counter reads made."""
    deadline = time.monotonic() + bound
    last, reads, quiet = store.counters(), 1, 0
    while time.monotonic() < deadline and quiet < 2:
        time.sleep(SETTLE)
        for watch in watched:
            watch.sample()
        now = store.counters()
        reads += 1
        moved = sum(now[k] - last[k] for k in (store.key_in, store.key_out))
        quiet = quiet + 1 if moved < IDLE_BYTES else 0
        last = now
    return reads


def one(
    run: Run, store: Store, target_url: str, waiters: int, processes: int, prefix: str
) -> ScaleRow:
    row = ScaleRow(store.name, waiters, processes)
    name = f"scale-{store.name}-{waiters}"
    target = run.target.with_name(name, capacity=CAPACITY)
    target = dataclasses.replace(target, url=target_url)  # Redis: its own server
    queue_key = f"{prefix}:s:{name}:q"
    calib = cost_of_reading(store.counters)

    def per_item(key: str, a: dict[str, float], b: dict[str, float], n: int, k: int) -> float:
        # k counter reads fell between a and b; each costs calib[key]
        return (b[key] - a[key] - k * calib[key]) / n

    bound = max(120.0, waiters * 0.02)
    per = [waiters // processes + (i < waiters % processes) for i in range(processes)]
    with Workers(run.work_dir, max(run.sizes.worker_max_seconds, 4 * bound)) as workers:
        started = [
            workers.start(
                f"scale-{store.name}-{waiters}-{i}",
                "aio-waiters",
                IMPL[store.name],
                target,
                waiters=n,
                hold_ms=run.sizes.aio_hold_ms,
                gate="server",
                report_grants=True,
            )
            for i, n in enumerate(per)
        ]
        ready = [json.loads(w.expect("READY", 120)) for w in started]
        watched = [Watched(w, run.sizes.aio_rss_limit_mb * 1024) for w in started]
        base = store.entries(queue_key)
        reads = 0
        before = store.counters()
        t0 = time.monotonic()
        for w in started:
            w.send("go")
        try:
            for watch in watched:
                watch.line(("STARTED",), bound)
            deadline = time.monotonic() + bound
            most, grew = base, time.monotonic()
            while (entries := store.entries(queue_key)) < base + waiters:
                reads += 1
                for watch in watched:
                    watch.sample()
                now = time.monotonic()
                if entries > most:
                    most, grew = entries, now
                if now > deadline or now - grew > STALLED:
                    raise TimeoutError(
                        f"{most - base:,} of {waiters:,} entries made, none for "
                        f"{now - grew:.0f} s ({now - t0:.0f} s after the start)"
                    )
                time.sleep(POLL)
            row.fill_s = time.monotonic() - t0
            reads += settle(store, watched, bound)
            full = store.counters()
            started[0].send(f"probe {PROBES}")
            took = json.loads(watched[0].line(("PROBED",), bound)[1])
            probed = store.counters()
            row.fill_in = per_item(store.key_in, before, full, waiters, reads + 1)
            row.fill_out = per_item(store.key_out, before, full, waiters, reads + 1)
            row.probe_in = per_item(store.key_in, full, probed, PROBES, 1)
            row.probe_out = per_item(store.key_out, full, probed, PROBES, 1)
            row.probe_ms = median(took["ms"])
            row.probes_unanswered = took["unanswered"]
            t1 = time.monotonic()
            for w in started:
                w.send("queued")
            try:
                for watch in watched:
                    watch.line(("QUEUED",), bound)
                done = [
                    json.loads(watch.line(("DONE",), run.sizes.scale_drain_s or bound)[1])
                    for watch in watched
                ]
            except TimeoutError:
                left = store.entries(queue_key) - base
                row.drain_stopped = (
                    f"{left:,} of {waiters:,} entries left {time.monotonic() - t1:.0f} s "
                    "after the gate opened"
                )
                return row
            row.drain_s = time.monotonic() - t1
            after = store.counters()
        except TimeoutError as exc:
            row.aborted = str(exc)
            return row
        for w in started:
            w.finish()

    row.drain_in = per_item(store.key_in, probed, after, waiters, 1)
    row.drain_out = per_item(store.key_out, probed, after, waiters, 1)
    grants = sorted(g for d in done for g in d["grants_at"])
    row.grants = len(grants)
    row.lag = fifo_lag([token for _, token in grants])
    peak = sum(
        max(d["peak_rss"], w.peak_rss) - r["VmRSS"]
        for d, w, r in zip(done, watched, ready, strict=True)
    )
    row.rss_per_waiter_kb = peak / waiters
    return row


@contextlib.contextmanager
def redis_store(servers: ServerSet, notes: list[str]) -> Iterator[tuple[Store, str, str]]:
    import redis

    with redis_server(os.environ.get("SEMAPHORE_RECIPES_BENCH_REDIS"), notes) as host_port:
        host, port = host_port.rsplit(":", 1)
        admin = redis.Redis(host=host, port=int(port))
        prefix = f"sr-scale-{uuid.uuid4().hex[:6]}"
        try:
            yield (
                Store("redis", servers, admin),
                f"redis://{host_port}/0?prefix={prefix}&session_timeout=60",
                prefix,
            )
        finally:
            admin.close()


def processes_for(waiters: int) -> int:
    """Four processes from 10,000 waiters on (each loop's share stays in its memory)."""
    return 1 if waiters < 10_000 else 4


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    rows: list[ScaleRow] = []
    for name in run.sizes.scale_stores:
        with contextlib.ExitStack() as stack:
            store, url, prefix = Store(name, servers), "", ""
            if name == "redis":
                store, url, prefix = stack.enter_context(redis_store(servers, results.notes))
            for w in run.sizes.scale_waiters:
                progress(f"scale: {name}, W={w}")
                try:
                    rows.append(one(run, store, url, w, processes_for(w), prefix))
                except (WorkerError, OSError) as exc:
                    results.errors.append((f"scale: {name} W={w}", str(exc)))
                    continue
                progress(f"scale: {rows[-1]}")
    results.scale_sections = report(rows)


def unanswered(row: ScaleRow) -> str:
    if not row.probes_unanswered:
        return ""
    return f" ({row.probes_unanswered}/{PROBES} no answer within 1 s)"


def report(rows: list[ScaleRow]) -> list[str]:
    def f(x: float, digits: int = 0) -> str:
        return "-" if x != x else f"{x:,.{digits}f}"

    lines = [
        "## Scale: W waiters on one semaphore, over several processes (issue 28)",
        "",
        (__doc__ or "").split("\n\n", 1)[1].strip(),
        "",
        "| store | W | processes | fill s | fill bytes / entry (in / out) | probe bytes "
        "(in / out) | probe ms | drain s | drain bytes / grant (in / out) | granted | FIFO lag "
        "| RSS / waiter KB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.aborted:
            lines.append(
                f"| {LABEL[r.store]} | {r.waiters:,} | {r.processes} | stopped: {r.aborted} "
                "| | | | | | | | |"
            )
            continue
        if r.drain_stopped:
            lines.append(
                f"| {LABEL[r.store]} | {r.waiters:,} | {r.processes} | {f(r.fill_s, 1)} "
                f"| {f(r.fill_in)} / {f(r.fill_out)} | {f(r.probe_in)} / {f(r.probe_out)} "
                f"| {f(r.probe_ms, 2)}{unanswered(r)} | stopped: {r.drain_stopped} "
                "| | | | |"
            )
            continue
        lines.append(
            f"| {LABEL[r.store]} | {r.waiters:,} | {r.processes} | {f(r.fill_s, 1)} "
            f"| {f(r.fill_in)} / {f(r.fill_out)} | {f(r.probe_in)} / {f(r.probe_out)} "
            f"| {f(r.probe_ms, 2)}{unanswered(r)} | {f(r.drain_s, 1)} "
            f"| {f(r.drain_in)} / {f(r.drain_out)} "
            f"| {r.grants:,}/{r.waiters:,} | {r.lag} | {f(r.rss_per_waiter_kb, 1)} |"
        )
    return [*lines, ""]
