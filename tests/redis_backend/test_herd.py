"""Redis herd: scripts run, messages pushed and inbox reads per release, flat in W."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from semaphore_recipes.testing.redis_harness import RedisHarness

from ..conftest import Workers
from ..herd import assert_flat, measure

COUNTERS = ("evalsha", "rpush", "blpop")  # scripts, messages pushed, inbox reads


def test_server_work_per_release_is_flat_in_the_number_of_waiters(
    redis_harness: RedisHarness, redis_admin: Any, workers: Workers, tmp_path: Path
) -> None:
    def read() -> dict[str, float]:
        stats = redis_admin.info("commandstats")
        return {k: float(stats.get(f"cmdstat_{k}", {}).get("calls", 0)) for k in COUNTERS}

    # at W=200 the handoffs are measured 100 deep: a waiter there must not need a
    # look of its own when admitted
    rows = {w: measure(redis_harness, read, workers, tmp_path, w) for w in (10, 200)}
    print()
    for w, r in rows.items():
        print(
            f"W={w:4d}: scripts {r['evalsha']:.1f}, messages pushed {r['rpush']:.1f}, "
            f"inbox reads {r['blpop']:.1f} per release"
        )
    # the BLPOPs include every client's idle rounds (one per 0.5 s while nothing
    # comes): they grow with the wall time of a handoff, a few per W processes
    assert_flat(rows, {"evalsha": 1, "rpush": 0.5, "blpop": 6})
    for r in rows.values():
        assert r["rpush"] <= 1.25  # one message per release: to the waiter it admits
        assert r["evalsha"] <= 1.25  # one script per release: the release's
