"""Herd: the server work per release stays flat as the number of waiters grows.

Capacity 2; W waiters in processes of 50 threads each. The test hands off one permit
at a time (a holder releases, the next waiter is granted and then holds), first W/2
times to reach the middle of the queue, where every waiter listed many entries that are
long gone by its turn, then HANDOFFS times while the server's own mntr counters are
read (mntr's own cost is measured and taken off).
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
HANDOFFS = 8


def _delta(server: Any, before: dict[str, Any]) -> dict[str, float]:
    after = server.mntr()
    return {k: float(after[k]) - float(before[k]) for k in COUNTERS}


def measure(
    service: Service, server: Any, workers: Workers, tmp_path: Path, waiters: int
) -> dict[str, float]:
    name = f"herd{waiters}"
    sem = service.connect().semaphore(name, capacity=2)
    order, releases = tmp_path / f"order{waiters}", tmp_path / f"release{waiters}"
    order.write_text("")
    releases.write_text("")
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
                "--release-file",
                str(releases),
            )
        )
    for p in procs:
        Workers.expect(p, "STARTED")
    wait_until(lambda: len(sem.status().waiters) == waiters, timeout=60)

    def grants() -> int:
        return len(order.read_text().split())

    def hand_off() -> None:
        expected = grants() + 1
        with releases.open("a") as f:
            f.write("go\n")
        wait_until(lambda: grants() >= expected, timeout=15)

    for h in holders:
        h.release()
    wait_until(lambda: grants() == 2)
    for _ in range(min(waiters // 2, waiters - HANDOFFS - 2)):
        hand_off()
    calib = _delta(server, server.mntr())
    before = server.mntr()
    for _ in range(HANDOFFS):
        hand_off()
    delta = _delta(server, before)
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(30)
    return {k: (delta[k] - calib[k]) / HANDOFFS for k in COUNTERS}


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
    small = rows[10]
    for w, r in rows.items():
        # Flat in W: a herd or a re-listing grows with the number of waiters (without
        # the view in the held mark this measured 85 packets in per release at W=200).
        # The slack allows the few extra wake-ups the design admits, bounded by capacity.
        assert r["zk_packets_received"] <= small["zk_packets_received"] * 1.5 + 2, w
        assert r["zk_packets_sent"] <= small["zk_packets_sent"] * 1.5 + 2, w
        assert r["zk_response_bytes"] <= small["zk_response_bytes"] * 1.5 + 300, w
        assert r["zk_sum_node_children_watch_count"] == 0  # no child watches at all
        assert r["zk_sum_node_deleted_watch_count"] + r["zk_sum_node_changed_watch_count"] <= 4
        assert r["zk_packets_received"] <= 8 and r["zk_packets_sent"] <= 10
