"""What a run found: rows per measurement, what was skipped and why, and statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def jain(counts: Sequence[float]) -> float:
    """Jain's fairness index: 1 when every client got the same, 1/n when one got all."""
    total, squares = sum(counts), sum(c * c for c in counts)
    return total * total / (len(counts) * squares) if squares else math.nan


@dataclass
class LatencyRow:
    """Uncontended acquire+release (or a handoff), in milliseconds."""

    backend: str
    impl: str
    label: str
    samples: int
    median_ms: float
    p99_ms: float
    ratio: float = math.nan  # median / the floor's median
    requests: float = math.nan  # server requests (ZK packets / gRPC messages in) per op
    replies: float = math.nan


@dataclass
class HerdRow:
    backend: str
    impl: str
    label: str
    waiters: int
    handoffs: int
    per_release: dict[str, float]

    @property
    def packets_in(self) -> float:
        key = (
            "zk_packets_received"
            if self.backend == "zookeeper"
            else ("grpc_server_msg_received_total")
        )
        return self.per_release[key]

    @property
    def packets_out(self) -> float:
        key = "zk_packets_sent" if self.backend == "zookeeper" else "grpc_server_msg_sent_total"
        return self.per_release[key]

    @property
    def response_bytes(self) -> float:
        return self.per_release.get("zk_response_bytes", math.nan)

    @property
    def notifications(self) -> float:
        if self.backend == "zookeeper":
            return sum(
                self.per_release[k]
                for k in (
                    "zk_sum_node_deleted_watch_count",
                    "zk_sum_node_changed_watch_count",
                    "zk_sum_node_children_watch_count",
                )
            )
        return self.per_release["etcd_debugging_mvcc_events_total"]


@dataclass
class ThroughputRow:
    backend: str
    impl: str
    label: str
    clients: int
    processes: int
    seconds: float
    grants: int
    ops_per_s: float
    jain: float
    ratio: float = math.nan  # ops/s / the raw loop's
    requests: float = math.nan  # server requests per grant
    hold_ms: float = 0.0
    cpu_us: float = math.nan  # the clients' processes' CPU time per grant, microseconds
    bytes_in: float = math.nan  # bytes the server received per grant
    bytes_out: float = math.nan  # bytes the server sent per grant

    @property
    def in_use(self) -> float:
        """Permits held on average (Little's law: grants per second x hold time)."""
        return self.ops_per_s * self.hold_ms / 1000


@dataclass
class WaitersRow:
    """W concurrent acquiring tasks in one event loop (one process), capacity C."""

    backend: str
    waiters: int
    capacity: int
    grants: int  # tasks granted, each once
    distinct_tokens: int
    fifo_lag: int  # most earlier entries not yet granted when a later one was
    threads_idle: int  # the process's native threads, connected, before the waiters
    threads_peak: int  # the most seen while the waiters ran (sampled every 20 ms)
    python_threads_peak: int  # threading.active_count() at the full queue and the end
    rss_idle_kb: int  # VmRSS before the waiters
    rss_peak_kb: int  # the most VmRSS sampled, or VmHWM if higher
    enqueue_s: float  # from the tasks' start to every entry in the store
    drain_s: float  # from the first release to the last
    requests: float = math.nan  # server requests (ZK packets / gRPC messages in) per grant
    replies: float = math.nan
    drain_requests: float = math.nan  # the same, from the first release on only
    drain_replies: float = math.nan
    response_bytes: float = math.nan  # ZooKeeper: bytes the server sent per grant
    aborted: str = ""  # why the run stopped before every task was granted, if it did

    @property
    def rss_per_waiter_kb(self) -> float:
        return (self.rss_peak_kb - self.rss_idle_kb) / self.waiters

    @property
    def fifo(self) -> bool:
        """Every task granted once, never before an earlier entry was admitted."""
        return (
            not self.aborted
            and self.grants == self.waiters
            and self.distinct_tokens == self.waiters
            and self.fifo_lag <= self.capacity - 1
        )


@dataclass
class Results:
    latency: list[LatencyRow] = field(default_factory=list)
    handoff: list[LatencyRow] = field(default_factory=list)
    herd: list[HerdRow] = field(default_factory=list)
    throughput: list[ThroughputRow] = field(default_factory=list)
    held: list[ThroughputRow] = field(default_factory=list)  # throughput with a hold time
    aio_latency: list[LatencyRow] = field(default_factory=list)
    aio_handoff: list[LatencyRow] = field(default_factory=list)
    aio_waiters: list[WaitersRow] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    errors: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    redis_sections: list[str] = field(default_factory=list)  # markdown (redis_bench)
    postgresql_sections: list[str] = field(default_factory=list)  # markdown (postgresql_bench)
    mysql_sections: list[str] = field(default_factory=list)  # markdown (mysql_bench)
    scale_sections: list[str] = field(default_factory=list)  # markdown (scale)

    def skip(self, what: str, why: str) -> None:
        self.skipped.append((what, why))
