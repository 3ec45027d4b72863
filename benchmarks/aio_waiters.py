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
- Threads: the process's native threads (``/proc/self/status``), sampled every 20 ms.
- RSS: ``VmHWM`` at the end less ``VmRSS`` once connected, per waiter.

When the queue is full: on a server, the orchestrator counts the entries on the server
(ZooKeeper ``zk_znode_count``, etcd's key count); ``memory://`` asks ``status()``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable

from .aio_impls import async_face_missing
from .config import Run
from .latency import IN_OUT, cost_of_reading
from .procs import WorkerError, Workers
from .results import Results, WaitersRow
from .servers import ServerSet

BACKENDS = {"memory": "aio-ours-memory", "zookeeper": "aio-ours-zk", "etcd": "aio-ours-etcd"}
CAPACITY = 10
POLL = 0.05  # seconds between two counts of the entries on the server


def one(run: Run, servers: ServerSet, backend: str, waiters: int) -> WaitersRow:
    target = run.target.with_name(f"aio-waiters-{backend}-{waiters}", capacity=CAPACITY)
    counted = backend in IN_OUT
    calib: dict[str, float] = {}
    if counted:
        calib = cost_of_reading(functools.partial(servers.counters, backend))
    bound = max(120.0, waiters / 20)  # seconds for each phase; a failure, not a figure
    with Workers(run.work_dir, run.sizes.worker_max_seconds) as workers:
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
        reads = 0  # counter reads between ``before`` and ``after``
        if counted:
            base_entries = servers.entries(backend)
            before = servers.counters(backend)
        worker.send("go")
        worker.expect("STARTED", bound)
        if counted:
            deadline = time.monotonic() + bound
            while True:
                reads += 1
                if servers.entries(backend) >= base_entries + waiters:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{waiters} entries not in {backend} within {bound:g} s")
                time.sleep(POLL)
            reads += 1
            full = servers.counters(backend)
            worker.send("queued")
        queued = json.loads(worker.expect("QUEUED", bound))
        done = json.loads(worker.expect("DONE", bound))
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
        threads_peak=done["peak_threads"],
        python_threads_peak=max(queued["python_threads"], done["python_threads"]),
        rss_idle_kb=ready["VmRSS"],
        rss_peak_kb=done["VmHWM"],
        enqueue_s=queued["enqueue_s"],
        drain_s=done["drain_s"],
    )
    if counted:
        key_in, key_out = IN_OUT[backend]
        # each interval between two reads holds the cost of one read
        row.requests = (after[key_in] - before[key_in] - (reads + 1) * calib[key_in]) / waiters
        row.replies = (after[key_out] - before[key_out] - (reads + 1) * calib[key_out]) / waiters
        row.drain_requests = (after[key_in] - full[key_in] - calib[key_in]) / waiters
        row.drain_replies = (after[key_out] - full[key_out] - calib[key_out]) / waiters
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
