"""etcd herd: gRPC messages and watch events per release, flat in W."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from semaphore_recipes.testing.etcd_harness import EtcdHarness

from ..conftest import Workers
from ..herd import assert_flat, measure

COUNTERS = (
    "grpc_server_msg_received_total",  # requests, incl. watch creates and keepalives
    "grpc_server_msg_sent_total",  # replies, incl. watch events
    "etcd_debugging_mvcc_events_total",  # events sent to watchers
)


def test_server_work_per_release_is_flat_in_the_number_of_waiters(
    ed: EtcdHarness, etcd_server: Any, workers: Workers, tmp_path: Path
) -> None:
    def read() -> dict[str, float]:
        m = etcd_server.metrics()
        return {k: float(m.get(k, 0.0)) for k in COUNTERS}

    rows = {w: measure(ed, read, workers, tmp_path, w) for w in (10, 100, 200)}
    print()
    for w, r in rows.items():
        print(
            f"W={w:4d}: gRPC messages in {r['grpc_server_msg_received_total']:.1f} "
            f"out {r['grpc_server_msg_sent_total']:.1f}, watch events "
            f"{r['etcd_debugging_mvcc_events_total']:.1f} per release"
        )
    assert_flat(
        rows,
        {
            "grpc_server_msg_received_total": 3,
            "grpc_server_msg_sent_total": 3,
            "etcd_debugging_mvcc_events_total": 2,
        },
    )
    for r in rows.values():
        assert r["etcd_debugging_mvcc_events_total"] <= 5
