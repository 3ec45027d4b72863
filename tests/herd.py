"""Herd measurement shared by the backends' herd tests.

Capacity 2; W waiters in processes of 50 threads each. The test hands off one permit
at a time (a holder releases, the next waiter is granted and then holds), first W/2
times to reach the middle of the queue, where every waiter listed many entries that are
long gone by its turn, then HANDOFFS times while the server's own counters are read
(the cost of reading them is measured and taken off).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from semaphore_recipes.testing.harness import Harness

from .conftest import Workers, wait_until

HANDOFFS = 8
Counters = Callable[[], Mapping[str, float]]


def _delta(read: Counters, before: Mapping[str, float]) -> dict[str, float]:
    after = read()
    return {k: after[k] - before[k] for k in before}


def measure(
    service: Harness, read: Counters, workers: Workers, tmp_path: Path, waiters: int
) -> dict[str, float]:
    """Server work per release (per counter) with ``waiters`` blocked waiters."""
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
    calib = _delta(read, read())
    before = read()
    for _ in range(HANDOFFS):
        hand_off()
    delta = _delta(read, before)
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(30)
    return {k: (delta[k] - calib[k]) / HANDOFFS for k in delta}


def assert_flat(rows: Mapping[int, Mapping[str, float]], slack: Mapping[str, float]) -> None:
    """Every counter at every W stays within 1.5x + slack of its value at the smallest W:
    a herd or a re-listing grows with the number of waiters."""
    small = rows[min(rows)]
    for w, r in rows.items():
        for k, extra in slack.items():
            assert r[k] <= small[k] * 1.5 + extra, (w, k, r[k], small[k])
