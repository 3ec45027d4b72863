"""The benchmark command (``python -m benchmarks``) runs end to end in its --tiny form
against the session's servers: tables, verdicts and plots, or a reason for each skip."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROWS = (
    # targets
    "| uncontended acquire+release / raw create+delete |",
    "| handoff / raw predecessor-watch floor |",
    "| packets per release at W=500 (in / out)",
    "| response bytes per release at W=500",
    "| throughput / raw create+delete loop |",
    "| etcd uncontended acquire+release / raw put+delete |",
    # one row of each measurement and backend
    "| ZooKeeper | raw create+delete (kazoo) |",
    "| ZooKeeper | semaphore-recipes Semaphore |",
    "| ZooKeeper | kazoo Semaphore |",
    "| ZooKeeper | kazoo Lock |",
    "| etcd | raw put(lease)+delete (EtcdClient) |",
    "| etcd | control: txn(create-if-absent put)+delete (EtcdClient) |",
    "| etcd | semaphore-recipes Semaphore |",
    "| ZooKeeper | ceiling: create + listing, one watch, delete; never waits |",
    "| etcd | ceiling: txn(create + listing), one watch from its revision, delete; never waits |",
    "| ZooKeeper | raw predecessor-watch floor (delete -> watch fires) |",
    "| etcd | raw predecessor-watch floor (delete -> watch event) |",
    # Redis (benchmarks/redis_bench.py)
    "| raw SET NX PX + DEL (the floor) |",
    "| raw notification floor (RPUSH -> BLPOP returns) |",
    "| raw SET NX PX + DEL loop |",
    "| ceiling: enqueue script, admission read, release script; never waits |",
    # PostgreSQL (benchmarks/postgresql_bench.py)
    "| raw INSERT + DELETE, one connection (the floor) |",
    "| semaphore-recipes Semaphore (sync, one backend) |",
    "| pg_advisory_lock / pg_advisory_unlock (one connection) |",
    "| raw notification floor (NOTIFY -> the LISTENing connection has it) |",
    "| semaphore-recipes Semaphore (holder and waiter in two backends) |",
    "| 20 | 1 | 20 |",  # the herd's W=20
    "| raw INSERT + DELETE loop (a connection per thread) |",
    # MySQL/MariaDB (benchmarks/mysql_bench.py)
    "## MySQL/MariaDB (issue 26)",
    "| raw INSERT + DELETE, one PyMySQL connection (the floor) |",
    "| MySQL named lock (GET_LOCK / RELEASE_LOCK, one connection) |",
    "| MySQL named lock: GET_LOCK returns on another connection's RELEASE_LOCK (the floor) |",
    "| raw INSERT + DELETE loop (a PyMySQL connection per thread) |",
    # W waiters over several processes (benchmarks/scale.py), W=200 in one
    "## Scale: W waiters on one semaphore",
    "| ZooKeeper | 200 | 1 |",
    "| etcd | 200 | 1 |",
    "| Redis | 200 | 1 |",
)


#: the asyncio rows of each server backend (tables of ``aio-latency``, ``aio-handoff``,
#: ``aio-waiters``), expected when the backend has its asyncio face here
AIO = {"ZooKeeper": "zookeeper", "etcd": "etcd"}
AIO_ROWS = {
    "ZooKeeper": (
        "| ZooKeeper | asyncio raw create+delete (kazoo async, awaited) |",
        "| ZooKeeper | asyncio predecessor-watch floor (delete -> task woken) |",
        "| ZooKeeper | semaphore-recipes AsyncSemaphore |",
        "| ZooKeeper | 200 | 200 |",
    ),
    "etcd": (
        "| etcd | asyncio raw put(lease)+delete (grpc.aio stubs) |",
        "| etcd | asyncio predecessor-watch floor (delete -> task woken) |",
        "| etcd | semaphore-recipes AsyncSemaphore |",
        "| etcd | 200 | 200 |",
    ),
}


def has_async_face(scheme: str) -> bool:
    from semaphore_recipes import registry

    return registry.backend_class(scheme).capabilities.async_face


@pytest.mark.slow
def test_tiny_run_writes_every_table_and_the_plots_or_says_why_not(
    zookeeper_server: Any, etcd_server: Any, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--tiny",
            "--zookeeper",
            zookeeper_server.host_port,
            "--etcd",
            etcd_server.endpoint,
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip  (the timeout bounds it; how fast it runs is not a test's business)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / "benchmarks.md").read_text()
    assert report.strip() == done.stdout.strip()  # the same tables on stdout
    for row in ROWS:
        assert row in report, row
    for section in ("## Uncontended", "## Handoff", "## Herd", "## Throughput"):
        assert section in report
    assert "## Errors" not in report

    # the asyncio face: every backend that has it, measured; any other, said so
    assert "### The asyncio face (issue 14)" in report
    assert "| memory:// | semaphore-recipes AsyncSemaphore (in-process store) |" in report
    assert "| memory:// | 20 | 20 | 0 (FIFO) |" in report  # 20 tasks in one loop, in order
    with_face = [name for name, backend in AIO.items() if has_async_face(backend)]
    for name, backend in AIO.items():
        rows = AIO_ROWS[name]
        if name in with_face:
            for row in rows:
                assert row in report, row
        else:
            for what in ("aio-latency", "aio-handoff", "aio-waiters"):
                assert f"- {what}: {backend}: the {backend} backend has no asyncio face" in report
            assert not any(row in report for row in rows)
    missing = [name for name in AIO if name not in with_face]
    unmeasured = [line for line in report.splitlines() if "not measured" in line]
    assert all(any(line.startswith(f"| {name}") for name in missing) for line in unmeasured)
    assert len(unmeasured) == 6 * len(missing)  # its two ratios and four figures of W tasks
    assert report.count("| **met** |") + report.count("| **missed** |") == 6 + 6 * len(with_face)

    plots = [tmp_path / "bench-latency.png", tmp_path / "bench-herd.png"]
    if importlib.util.find_spec("matplotlib") is None:
        assert "bench-herd.png: matplotlib is not installed" in report
        assert not any(p.exists() for p in plots)
    else:
        for plot in plots:
            assert plot.read_bytes()[:8] == PNG_MAGIC, plot
            assert f"![{plot.name}]({plot.name})" in report

    if importlib.util.find_spec("pals") is None or importlib.util.find_spec("sqlalchemy") is None:
        assert "- postgresql latency: pals Lock: not installed" in report
    else:
        assert "| pals Lock (SQLAlchemy pool) |" in report

    if importlib.util.find_spec("MySQLdb") is None:
        assert "- mysql latency: mysqlclient floor: not installed (MySQLdb)" in report
    else:
        assert "| raw INSERT + DELETE, one mysqlclient connection (C driver) |" in report

    if importlib.util.find_spec("etcd3") is None:
        assert "python-etcd3 Lock: python-etcd3 is not installed" in report
    else:  # the peer ran, or the report says why it could not (e.g. a protobuf clash)
        assert "| etcd | python-etcd3 Lock |" in report or "- latency: python-etcd3 Lock:" in report
