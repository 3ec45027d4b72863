"""W concurrent waiters on one semaphore in one event loop (capacity 10).

One worker process per (backend, W), so its resident set and threads are that run's
alone. It connects, opens the semaphore and reports its figures (``READY``); then it
starts W tasks that each acquire once. The first ten granted hold until every entry is
in the store (the queue is full: W - 10 waiting), the others hold briefly and release.
The server's request counters are read before the tasks start, when the queue is full
and when the last task released, less the cost of the reads themselves; per grant,
they are the server's work for one task's whole acquire and release.

- FIFO: tokens (the entries' creation versions) in the order the tasks were granted,
  checked against their creation order: when a task is granted, fewer than the
  capacity entries created before its own may still be waiting for their tasks to
  resume (``aio_worker.fifo_lag``).
- Threads: the process's native threads (``/proc/<pid>/status``), sampled every 20 ms
  inside (a task of its loop) and every 50 ms from outside.
- RSS: the peak (``VmRSS`` sampled every 20 ms inside, every 50 ms from outside, and
  ``VmHWM``, which the kernel updates only now and then) less ``VmRSS`` once connected,
  per waiter. A process that passes the run's RSS limit is killed and the row says so
  (its RSS per waiter is then a lower bound).

When the queue is full: on a server, the orchestrator counts the entries on the server
(ZooKeeper ``zk_znode_count``, etcd's key count); ``memory://`` asks ``status()``.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable
from typing import Any

from .aio_impls import async_face_missing
from .config import Run
from .latency import IN_OUT, cost_of_reading
from .procs import Worker, WorkerError, Workers
from .results import Results, WaitersRow
from .servers import ServerSet

BACKENDS = {"memory": "aio-ours-memory", "zookeeper": "aio-ours-zk", "etcd": "aio-ours-etcd"}
CAPACITY = 10
POLL = 0.05  # seconds between two counts of the entries on the server


def phase_bound(waiters: int) -> float:
    """Seconds each phase (start, enqueue, drain) may take before the row stops: a safety
    stop for a run that does not end, not a target. It grows with W (the relay of W grants
    is serial), so a slow but finishing run reports its real drain time."""
    return max(60.0, waiters * 0.05)


class OverLimit(Exception):
    """The worker passed the run's RSS limit and was stopped."""


class Watched:
    """A waiters' worker seen from outside: its RSS and threads sampled from ``/proc``
    while its lines are awaited; killed when it passes ``limit_kb`` of RSS."""

    def __init__(self, worker: Worker, limit_kb: int) -> None:
        self.worker = worker
        self.limit_kb = limit_kb
        self.peak_rss = 0
        self.peak_threads = 0
        self.started = time.monotonic()

    def sample(self) -> None:
        now = self.worker.process_status()
        if not now:
            return
        self.peak_rss = max(self.peak_rss, now["VmRSS"])
        self.peak_threads = max(self.peak_threads, now["Threads"])
        if now["VmRSS"] > self.limit_kb:
            raise OverLimit(
                f"stopped at {now['VmRSS'] / 1024:.0f} MB of RSS (the run's limit: "
                f"{self.limit_kb / 1024:.0f} MB) {time.monotonic() - self.started:.0f} s "
                "after the tasks started"
            )

    def line(self, words: tuple[str, ...], timeout: float) -> tuple[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            self.sample()
            found = self.worker.next_line(words, POLL)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"stopped: no {' or '.join(words)} from the worker {timeout:g} s after "
                    "it was asked"
                )


def one(run: Run, servers: ServerSet, backend: str, waiters: int) -> WaitersRow:
    target = run.target.with_name(f"aio-waiters-{backend}-{waiters}", capacity=CAPACITY)
    counted = backend in IN_OUT
    calib: dict[str, float] = {}
    if counted:
        calib = cost_of_reading(functools.partial(servers.counters, backend))
    bound = phase_bound(waiters)
    queued: dict[str, Any] = {}
    with Workers(run.work_dir, max(run.sizes.worker_max_seconds, 3 * bound)) as workers:
        worker = workers.start(
            f"aio-waiters-{backend}-{waiters}",
            "aio-waiters",
            BACKENDS[backend],
            target,
            waiters=waiters,
            hold_ms=run.sizes.aio_hold_ms,
            gate="server" if counted else "self",
        )
        ready = json.loads(worker.expect("READY", 120))
        watched = Watched(worker, run.sizes.aio_rss_limit_mb * 1024)
        reads = 0  # counter reads between ``before`` and ``after``
        if counted:
            base_entries = servers.entries(backend)
            before = servers.counters(backend)
        worker.send("go")
        try:
            watched.line(("STARTED",), bound)
            if counted:
                deadline = time.monotonic() + bound
                while True:
                    watched.sample()
                    reads += 1
                    if servers.entries(backend) >= base_entries + waiters:
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"stopped: fewer than {waiters} entries in {backend} "
                            f"{bound:g} s after the tasks started"
                        )
                    time.sleep(POLL)
                reads += 1
                full = servers.counters(backend)
                worker.send("queued")
            queued = json.loads(watched.line(("QUEUED",), bound)[1])
            done = json.loads(watched.line(("DONE",), bound)[1])
        except (OverLimit, TimeoutError) as exc:
            # a run that cannot finish is a figure too: how far it got, and why it stopped
            return WaitersRow(
                backend,
                waiters,
                CAPACITY,
                grants=0,
                distinct_tokens=0,
                fifo_lag=-1,
                threads_idle=ready["Threads"],
                threads_peak=watched.peak_threads,
                python_threads_peak=ready["python_threads"],
                rss_idle_kb=ready["VmRSS"],
                rss_peak_kb=watched.peak_rss,
                enqueue_s=queued.get("enqueue_s", math.nan),
                drain_s=math.nan,
                aborted=str(exc),
            )
        if counted:
            after = servers.counters(backend)
        worker.finish()
    row = WaitersRow(
        backend,
        waiters,
        CAPACITY,
        grants=done["grants"],
        distinct_tokens=done["distinct"],
        fifo_lag=done["fifo_lag"],
        threads_idle=ready["Threads"],
        threads_peak=max(done["peak_threads"], watched.peak_threads),
        python_threads_peak=max(queued["python_threads"], done["python_threads"]),
        rss_idle_kb=ready["VmRSS"],
        rss_peak_kb=max(done["peak_rss"], watched.peak_rss),
        enqueue_s=queued["enqueue_s"],
        drain_s=done["drain_s"],
    )
    if counted:
        key_in, key_out = IN_OUT[backend]

        def per_grant(key: str, start: dict[str, float], intervals: int) -> float:
            # each interval between two reads holds the cost of one read
            return (after[key] - start[key] - intervals * calib[key]) / waiters

        row.requests = per_grant(key_in, before, reads + 1)
        row.replies = per_grant(key_out, before, reads + 1)
        row.drain_requests = per_grant(key_in, full, 1)
        row.drain_replies = per_grant(key_out, full, 1)
        if backend == "zookeeper":
            row.response_bytes = per_grant("zk_response_bytes", before, reads + 1)
    return row


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    for backend in BACKENDS:
        why = async_face_missing(backend)
        if why is not None:
            results.skip(f"aio-waiters: {backend}", why)
            continue
        for waiters in run.sizes.aio_waiters:
            progress(f"aio-waiters: {backend}, W={waiters}")
            try:
                results.aio_waiters.append(one(run, servers, backend, waiters))
            except (WorkerError, TimeoutError, OSError) as exc:
                results.errors.append((f"aio-waiters: {backend} W={waiters}", str(exc)))
