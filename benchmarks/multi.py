"""Several semaphores at once: ``acquire_all`` over 1 and over 3 semaphores, uncontended,
beside one ``Semaphore`` and the raw floor, measured as the latency rows are (requests
and replies per cycle from the server's counters). Its own rows join the uncontended
table; the floors' and the Semaphore's rows there are the latency measurement's.
"""

from __future__ import annotations

from collections.abc import Callable

from .config import Run
from .latency import FLOOR, batches
from .results import Results
from .servers import ServerSet

ALL = ("ours-zk-all1", "ours-zk-all3", "ours-etcd-all1", "ours-etcd-all3")
IMPLS = (
    "raw-zk",
    "ours-zk",
    "ours-zk-all1",
    "ours-zk-all3",
    "raw-etcd",
    "ours-etcd",
    "ours-etcd-all1",
    "ours-etcd-all3",
)


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    floors = {impl: FLOOR["zookeeper" if "zk" in impl else "etcd"] for impl in IMPLS}
    rows = batches(run, servers, results, progress, IMPLS, floors, mode="latency")
    # the floors and the one Semaphore ran beside them for the ratios: their own rows
    # are the latency measurement's
    results.latency += [row for row in rows if row.impl in ALL]
