"""Herd: the server work per release stays flat as the number of waiters grows.

Capacity 2; W waiters in processes of 50 threads each; every granted waiter holds
0.1 s and releases (and does not queue again: an enqueue's listing grows with W by
nature, and is not part of a release), so releases hand off one after another. The server's own mntr
counters are read around K handoffs (mntr's own cost is measured and taken off).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..conftest import Service, Workers, wait_until

COUNTERS = (
    "zk_packets_received",
    "zk_packets_sent",
    "zk_response_bytes",
    "zk_sum_node_deleted_watch_count",
    "zk_sum_node_changed_watch_count",
    "zk_sum_node_children_watch_count",
)
HANDOFFS = 4  # per measurement; W=10 leaves room for warm-up and these


def _delta(server: Any, before: dict[str, Any]) -> dict[str, float]:
    after = server.mntr()
    return {k: float(after[k]) - float(before[k]) for k in COUNTERS}


def measure(
    service: Service, server: Any, workers: Workers, tmp_path: Path, waiters: int
) -> dict[str, float]:
    name = f"herd{waiters}"
    sem = service.connect().semaphore(name, capacity=2)
    order = tmp_path / f"order{waiters}"
    order.write_text("")
    holders = [sem.acquire(), sem.acquire()]
    procs: list[Any] = []
    for _ in range(math.ceil(waiters / 50)):
        n = min(50, waiters - 50 * len(procs))
        procs.append(
            workers.start(
                service.url_with(session_timeout=30),
                name,
                "2",
                "herd",
                "--threads",
                str(n),
                "--order-file",
                str(order),
                "--hold",
                "0.1",
            )
        )
    for p in procs:
        Workers.expect(p, "STARTED")
    wait_until(lambda: len(sem.status().waiters) == waiters, timeout=60)
    for h in holders:
        h.release()
    # Measure in the middle of the queue: these waiters listed W/2 entries that are
    # long gone by their turn, so a head that probed its whole view would show here.
    warm_up = min(waiters // 2, waiters - HANDOFFS - 3)
    wait_until(lambda: len(order.read_text().split()) >= warm_up, timeout=60)

    # mntr's own cost, measured the same way
    m0 = server.mntr()
    calib = _delta(server, m0)
    before = server.mntr()
    start = len(order.read_text().split())
    wait_until(lambda: len(order.read_text().split()) >= start + HANDOFFS, timeout=30)
    done = len(order.read_text().split()) - start
    delta = _delta(server, before)
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(30)
    return {k: (delta[k] - calib[k]) / done for k in COUNTERS}


def test_server_work_per_release_is_flat_in_the_number_of_waiters(
    service: Service, zookeeper_server: Any, workers: Workers, tmp_path: Path
) -> None:
    if service.kind != "zookeeper":
        return
    rows = {w: measure(service, zookeeper_server, workers, tmp_path, w) for w in (10, 100, 200)}
    print()
    for w, r in rows.items():
        notes = r["zk_sum_node_deleted_watch_count"] + r["zk_sum_node_changed_watch_count"]
        print(
            f"W={w:4d}: packets in {r['zk_packets_received']:.1f} out {r['zk_packets_sent']:.1f} "
            f"response bytes {r['zk_response_bytes']:.0f} notifications {notes:.1f} per release"
        )
    small, large = rows[10], rows[200]
    # Flat in W: a herd or a re-listing would grow with the number of waiters.
    assert large["zk_packets_received"] <= small["zk_packets_received"] + 1.5
    assert large["zk_packets_sent"] <= small["zk_packets_sent"] + 1.5
    assert large["zk_response_bytes"] <= small["zk_response_bytes"] + 300
    for r in rows.values():
        assert r["zk_sum_node_children_watch_count"] == 0  # no child watches at all
        assert r["zk_sum_node_deleted_watch_count"] + r["zk_sum_node_changed_watch_count"] <= 3
        assert r["zk_packets_received"] <= 8 and r["zk_packets_sent"] <= 10
