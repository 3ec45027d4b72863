"""The markdown report: the targets with met/missed, then one table per measurement."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from .results import HerdRow, LatencyRow, Results, ThroughputRow, WaitersRow
from .targets import NONE, Verdict, aio_verdicts, ratio, verdicts

BACKEND = {"zookeeper": "ZooKeeper", "etcd": "etcd", "memory": "memory://"}

LATENCY_TEXT = (
    "One client alone: acquire, then release, in a loop (capacity 10 for the semaphores; "
    "the locks are mutexes). Every implementation runs in a worker process of its own, all "
    "connected at once; they take turns batch by batch. *requests / op* and *replies / op*: "
    "what the server received and sent per cycle (ZooKeeper packets, etcd gRPC messages; "
    "read around every batch), i.e. the round trips. *acquire_all of k semaphores*: "
    "`backend.acquire_all` over k semaphores, its ratio against the floor run beside it "
    "(etcd: one txn creates every entry and lists every queue, one deletes them; "
    "ZooKeeper: one `multi` each way, the k listings sent behind the create, one read of "
    "the token)."
)
HANDOFF_TEXT = (
    "Capacity 1. A holder process releases; a waiter blocked in another process returns "
    "from acquire. Measured from the release call to the acquire's return (CLOCK_MONOTONIC, "
    "one machine). The floor: one process deletes a key, another process's watch callback "
    "on that key fires (ZooKeeper: kazoo `exists` watch; etcd: a watch through the "
    "library's own gRPC layer)."
)
HERD_TEXT = (
    "Capacity 2, W blocked waiters (worker processes of 50 threads, one session per "
    "process), permits handed off one at a time in the middle of the queue (after W/2 "
    "handoffs); the server's own counters per release, less the cost of reading them. "
    "ZooKeeper (`mntr`): packets received (in) / sent (out), zk_response_bytes, watches fired "
    "(node deleted / data changed / children changed). etcd (`/metrics`): gRPC messages "
    "received / sent, mvcc events sent to watchers."
)
THROUGHPUT_TEXT = (
    "Acquire -> release loops, no hold time, every client with a session of its own, "
    "capacity 10. The raw loop is the floor's create+delete (put+delete), run by the same "
    "clients in the same processes. Jain's index over the per-client grant counts "
    "(1 = perfectly even). *requests / grant*: what the server received per grant. "
    "*client CPU / grant*: the user+system CPU time of the client processes over the "
    "loops (every thread: the library's own and the client library's) divided by the "
    "grants, a cost that does not depend on how many cores the machine has; *bytes / "
    "grant*: what the server received and sent. "
    "The *ceiling* rows are not semaphores: each cycle sends what a contended, "
    "herd-free FIFO acquire must send and never waits, so no such protocol can beat "
    "their ratios on this machine (docs/design.md section 9): on ZooKeeper the create "
    "and listing back to back, one watch, the delete; on etcd one txn that creates the "
    "entry and lists the queue, one watch on the predecessor from the txn's revision "
    "(its create and, once fired, its cancel, on the client's watch stream), the delete."
)


AIO_LATENCY_TEXT = (
    "The asyncio face, one client alone on a worker's event loop: `await acquire()`, then "
    "`await release()`, in a loop (capacity 10); every implementation in a worker process "
    "of its own, all connected at once, taking turns batch by batch, the server's request "
    "counters read around every batch. The floors, awaited from the loop as well: "
    "ZooKeeper, kazoo's `create_async` "
    "(ephemeral) + `delete_async`, each reply handed to the loop with "
    "`loop.call_soon_threadsafe`; etcd, a `Put` with a lease granted once + a `DeleteRange` "
    "over a `grpc.aio` channel with the project's generated stubs. `memory://` (an "
    "in-process store, no floor) shows what the face itself costs."
)
AIO_HANDOFF_TEXT = (
    "Capacity 1. A holder process's loop releases; a task of another process's loop, "
    "blocked in `await sem.acquire()`, resumes. Measured from the release call to the "
    "task's resumption (CLOCK_MONOTONIC, one machine). The floor: one process deletes a "
    "key; a task of the other process's loop awaiting a watch on it wakes (ZooKeeper: a "
    "kazoo `exists` watch whose callback wakes the loop with `call_soon_threadsafe`; etcd: "
    "a watch on a `grpc.aio` Watch stream)."
)
AIO_WAITERS_TEXT = (
    "W tasks on one event loop each acquire once from one semaphore of capacity 10 (one "
    "worker process per backend and W, one session): the first ten granted hold until all "
    "W entries are in the store, the others hold 1 ms and release. *FIFO lag*: the most "
    "entries created before a granted one (lower token) not yet granted at that moment; "
    "FIFO admission keeps it below the capacity. A run that passes the run's RSS limit "
    "or does not end within its bound (W/20 s per phase, at least 60 s: a safety stop "
    "that grows with W, not a target) is stopped, and "
    "its row says how far it got. *threads*: the process's native threads "
    "(`/proc/self/status`) once connected / at their peak while the tasks ran (sampled "
    "every 20 ms) / Python threads. *RSS / waiter*: the peak RSS (sampled every 20 ms, "
    "and `VmHWM`) less the RSS once connected, over W. *requests / grant*: server requests "
    "(ZooKeeper packets, etcd gRPC messages) received / sent during the whole run per "
    "task (its enqueue, grant and "
    "release), and from the first release on (*drain*), less the cost of reading them; "
    "*response bytes*: what the ZooKeeper server sent per grant (`zk_response_bytes`)."
)


def fmt(value: float, digits: int = 2) -> str:
    return NONE if math.isnan(value) else f"{value:.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]


def targets_table(results: Results) -> list[str]:
    header = [
        "figure",
        "kazoo Semaphore (issue)",
        "kazoo Semaphore, this run",
        "target",
        "semaphore-recipes, this run",
        "verdict",
    ]
    rows = [
        [v.figure, v.kazoo_issue, v.kazoo_now, v.goal, v.ours_now, f"**{v.verdict}**"]
        for v in verdicts(results)
    ]
    return table(header, rows)


def latency_table(rows: Sequence[LatencyRow], floor: str, traffic: bool) -> list[str]:
    header = ["backend", "implementation", "samples", "median ms", "p99 ms", f"median / {floor}"]
    if traffic:
        header += ["requests / op", "replies / op"]
    body = []
    for r in rows:
        row = [
            BACKEND[r.backend],
            r.label,
            str(r.samples),
            fmt(r.median_ms, 3),
            fmt(r.p99_ms, 3),
            ratio(r.ratio),
        ]
        if traffic:
            row += [fmt(r.requests, 1), fmt(r.replies, 1)]
        body.append(row)
    return table(header, body)


def aio_targets_table(rows: Sequence[Verdict]) -> list[str]:
    header = ["figure", "target", "semaphore-recipes, this run", "verdict"]
    return table(header, ([v.figure, v.goal, v.ours_now, f"**{v.verdict}**"] for v in rows))


def waiters_table(rows: Sequence[WaitersRow]) -> list[str]:
    header = [
        "backend",
        "W",
        "granted",
        "FIFO lag",
        "threads idle / peak / Python",
        "RSS idle MB",
        "RSS / waiter KB",
        "enqueue s",
        "drain s",
        "requests / grant (in / out)",
        "drain (in / out)",
        "response bytes / grant",
    ]
    body = [
        [
            BACKEND[r.backend],
            str(r.waiters),
            "stopped" if r.aborted else str(r.grants),
            NONE if r.aborted else f"{r.fifo_lag} ({'FIFO' if r.fifo else 'NOT FIFO'})",
            f"{r.threads_idle} / {r.threads_peak} / {r.python_threads_peak}",
            fmt(r.rss_idle_kb / 1024, 1),
            fmt(r.rss_per_waiter_kb, 1),
            fmt(r.enqueue_s, 2),
            fmt(r.drain_s, 2),
            f"{fmt(r.requests, 1)} / {fmt(r.replies, 1)}",
            f"{fmt(r.drain_requests, 1)} / {fmt(r.drain_replies, 1)}",
            fmt(r.response_bytes, 0),
        ]
        for r in sorted(rows, key=lambda r: (r.backend, r.waiters))
    ]
    aborted = [
        f"- {BACKEND[r.backend]}, W={r.waiters}: {r.aborted}; its figures are what it had "
        "reached by then (RSS / waiter: a lower bound)."
        for r in rows
        if r.aborted
    ]
    return table(header, body) + ([*aborted, ""] if aborted else [])


def herd_table(rows: Sequence[HerdRow]) -> list[str]:
    header = [
        "backend",
        "implementation",
        "W",
        "handoffs",
        "in / release",
        "out / release",
        "response bytes / release",
        "watches fired / release",
    ]
    body = []
    for r in sorted(rows, key=lambda r: (r.backend != "zookeeper", r.impl, r.waiters)):
        if r.backend == "zookeeper":
            fired = "{:.1f} ({:.1f} / {:.1f} / {:.1f})".format(
                r.notifications,
                r.per_release["zk_sum_node_deleted_watch_count"],
                r.per_release["zk_sum_node_changed_watch_count"],
                r.per_release["zk_sum_node_children_watch_count"],
            )
        else:
            fired = fmt(r.notifications, 1)
        body.append(
            [
                BACKEND[r.backend],
                r.label,
                str(r.waiters),
                str(r.handoffs),
                fmt(r.packets_in, 1),
                fmt(r.packets_out, 1),
                fmt(r.response_bytes, 0),
                fired,
            ]
        )
    return table(header, body)


def throughput_table(rows: Sequence[ThroughputRow]) -> list[str]:
    header = [
        "backend",
        "implementation",
        "clients / processes",
        "seconds",
        "grants",
        "ops/s",
        "Jain's index",
        "ops/s / raw loop",
        "requests / grant",
        "client CPU us / grant",
        "bytes in / out per grant",
    ]
    body = [
        [
            BACKEND[r.backend],
            r.label,
            f"{r.clients} / {r.processes}",
            f"{r.seconds:g}",
            str(r.grants),
            fmt(r.ops_per_s, 0),
            fmt(r.jain, 3),
            ratio(r.ratio),
            fmt(r.requests, 1),
            fmt(r.cpu_us, 0),
            f"{fmt(r.bytes_in, 0)} / {fmt(r.bytes_out, 0)}",
        ]
        for r in rows
    ]
    return table(header, body)


HELD_TEXT = (
    "The same loops with a hold between acquire and release and fewer clients (a few more "
    "than the permits), capacity 10. *permits in use*: grants per second x hold time "
    "(Little's law), out of the capacity: how close a semaphore comes to lending out all "
    "its permits when every grant is contended. On this machine the clients' CPU runs out "
    "first (a contended grant costs several requests, each a few hundred microseconds of "
    "kazoo or gRPC client time), and grants are handed from waiter to waiter in queue "
    "order (docs/design.md section 9)."
)


def held_table(rows: Sequence[ThroughputRow], capacity: int) -> list[str]:
    header = [
        "backend",
        "implementation",
        "clients / processes",
        "hold",
        "grants",
        "ops/s",
        "permits in use",
        "Jain's index",
        "requests / grant",
        "client CPU us / grant",
        "bytes in / out per grant",
    ]
    body = [
        [
            BACKEND[r.backend],
            r.label,
            f"{r.clients} / {r.processes}",
            f"{r.hold_ms:g} ms",
            str(r.grants),
            fmt(r.ops_per_s, 0),
            f"{fmt(r.in_use, 1)} of {capacity}",
            fmt(r.jain, 3),
            fmt(r.requests, 1),
            fmt(r.cpu_us, 0),
            f"{fmt(r.bytes_in, 0)} / {fmt(r.bytes_out, 0)}",
        ]
        for r in rows
    ]
    return table(header, body)


def by_backend(rows: Sequence[LatencyRow], backend: str) -> list[LatencyRow]:
    return [r for r in rows if r.backend == backend]


def sections(results: Results, capacity: int) -> list[str]:
    lines: list[str] = []
    if results.latency:
        lines += ["## Uncontended acquire+release", "", LATENCY_TEXT, ""]
        for backend, floor in (("zookeeper", "raw create+delete"), ("etcd", "raw put+delete")):
            if rows := by_backend(results.latency, backend):
                lines += latency_table(rows, floor, traffic=True)
    if results.handoff:
        lines += ["## Handoff", "", HANDOFF_TEXT, ""]
        for backend in ("zookeeper", "etcd"):
            if rows := by_backend(results.handoff, backend):
                lines += latency_table(rows, "floor", traffic=False)
    if results.herd:
        lines += ["## Herd", "", HERD_TEXT, "", *herd_table(results.herd)]
    if results.throughput:
        lines += ["## Throughput", "", THROUGHPUT_TEXT, "", *throughput_table(results.throughput)]
    if results.held:
        lines += ["### With a hold time", "", HELD_TEXT, "", *held_table(results.held, capacity)]
    lines += aio_sections(results)
    return lines


def aio_sections(results: Results) -> list[str]:
    lines: list[str] = []
    if results.aio_latency:
        lines += ["## asyncio: uncontended acquire+release", "", AIO_LATENCY_TEXT, ""]
        for backend, floor in (("zookeeper", "raw"), ("etcd", "raw"), ("memory", "raw")):
            if rows := by_backend(results.aio_latency, backend):
                lines += latency_table(rows, floor, traffic=backend != "memory")
    if results.aio_handoff:
        lines += ["## asyncio: handoff", "", AIO_HANDOFF_TEXT, ""]
        for backend in ("zookeeper", "etcd"):
            if rows := by_backend(results.aio_handoff, backend):
                lines += latency_table(rows, "floor", traffic=False)
    if results.aio_waiters:
        lines += ["## asyncio: concurrent waiters in one event loop", "", AIO_WAITERS_TEXT, ""]
        lines += waiters_table(results.aio_waiters)
    return lines


def render(
    results: Results, environment: Sequence[str], command: str, tiny: bool, capacity: int
) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `{command}` (`bash scripts/bench` installs what it needs and runs it). "
        "Every figure below comes from this one run, against the same servers.",
        "",
    ]
    if tiny:
        lines += ["**A `--tiny` run: counts shrunk for CI, figures indicative only.**", ""]
    lines += [*(f"- {e}" for e in environment), ""]
    lines += ["## Targets", "", *targets_table(results)]
    lines += ["### The asyncio face (issue 14)", "", *aio_targets_table(aio_verdicts(results))]
    lines += sections(results, capacity)
    lines += results.redis_sections
    lines += results.postgresql_sections
    lines += results.mysql_sections
    lines += results.scale_sections
    if results.plots:
        lines += ["## Plots", "", *(f"![{p}]({p})" for p in results.plots), ""]
    if results.skipped:
        lines += ["## Skipped", "", *(f"- {what}: {why}" for what, why in results.skipped), ""]
    if results.errors:
        lines += ["## Errors", ""]
        lines += [f"- {what}: {why.splitlines()[0] if why else ''}" for what, why in results.errors]
        lines.append("")
    if results.notes:
        lines += ["## Notes", "", *(f"- {n}" for n in results.notes), ""]
    return "\n".join(lines)
