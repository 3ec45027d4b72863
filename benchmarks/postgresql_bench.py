"""The PostgreSQL backend (issue 25) against raw PostgreSQL floors and advisory locks.

Starts a PostgreSQL of its own on loopback (``fsync=off``: a benchmark of the protocol,
not of the disk) with ``pg_stat_statements`` loaded, which counts the statements the
clients send; unless ``SEMAPHORE_RECIPES_BENCH_POSTGRESQL`` gives a ``postgresql://``
URL with a query part (``?user=...``: libpq's parameters only) of a role that may create
tables and schemas (the statement counts need ``pg_stat_statements`` there, else they
are left out). Clients are threads of this process, each backend with connections of its own
(as in the Redis figures: comparable with each other, not with the ZooKeeper and etcd
ones, whose clients are processes).

* uncontended acquire+release (sync face, one backend) against ``INSERT`` + ``DELETE``
  of one row on one autocommit connection (the floor), a ``pg_advisory_lock`` mutex on
  one connection, and ``pals`` (an advisory-lock library on SQLAlchemy, when installed);
* handoff: a holder releases, a waiter of another backend returns from ``acquire``,
  against the raw notification floor (``NOTIFY`` -> the ``LISTEN``ing connection has it)
  and the same two advisory-lock mutexes;
* herd: W waiters (capacity 1, :data:`PER_BACKEND` threads per backend), each releasing
  at once when granted: statements, notifications (a spy connection listens on every
  waiting backend's channel) and connections per backend, which must not grow with W;
* throughput: client threads cycling on capacity C, against the floor's loop.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol
from urllib.parse import urlsplit

import psycopg

from .config import Run
from .results import Results, median, percentile
from .servers import ServerSet

SESSION = 60  # s: no session renewal or timed look falls inside a measurement
PER_BACKEND = 50  # herd: waiting threads per backend (one listening connection each)
TARGET = 1.3  # the bound on the two ratios to the raw floors
FLOOR = "raw INSERT + DELETE, one connection (the floor)"
APP_PREFIX = "sr-bench-"  # application_name of the backends the herd counts connections of


class Cycle(Protocol):
    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def close(self) -> None: ...


class RawFloor:
    """One row inserted, then deleted, on one autocommit connection: two statements,
    two transactions, the least a lock kept in a table can cost."""

    def __init__(self, conninfo: str, table: str) -> None:
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.key = uuid.uuid4().hex
        self.insert = f"INSERT INTO {table} (k) VALUES (%s)"
        self.delete = f"DELETE FROM {table} WHERE k = %s"

    def acquire(self) -> None:
        self.conn.execute(self.insert.encode(), (self.key,))

    def release(self) -> None:
        self.conn.execute(self.delete.encode(), (self.key,))

    def close(self) -> None:
        self.conn.close()


class Ours:
    def __init__(self, url: str, name: str, capacity: int) -> None:
        sr = importlib.import_module("semaphore_recipes")
        self.backend = sr.connect(url)
        self.semaphore = self.backend.semaphore(name, capacity=capacity)
        self.permit: Any = None

    def acquire(self) -> None:
        self.permit = self.semaphore.acquire(timeout=60)

    def release(self) -> None:
        self.permit.release()

    def close(self) -> None:
        self.backend.close()


class AdvisoryLock:
    """``pg_advisory_lock(k)`` / ``pg_advisory_unlock(k)`` on one connection: a mutex
    whose waiters block in the server; no queue order, no capacity, held while the
    connection lives."""

    def __init__(self, conninfo: str, key: int) -> None:
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.key = key

    def acquire(self) -> None:
        self.conn.execute(b"SELECT pg_advisory_lock(%s)", (self.key,))

    def release(self) -> None:
        self.conn.execute(b"SELECT pg_advisory_unlock(%s)", (self.key,))

    def close(self) -> None:
        self.conn.close()


class Pals:
    """``pals``' ``Lock``: ``pg_advisory_lock`` on a connection of SQLAlchemy's pool,
    with ``lock_timeout`` set first and the connection returned to the pool (and every
    advisory lock of it dropped) at each release."""

    def __init__(self, sqlalchemy_url: str, name: str) -> None:
        pals = importlib.import_module("pals")
        self.locker = pals.Locker("sr-bench", db_url=sqlalchemy_url)
        self.lock = self.locker.lock(name, blocking=True, acquire_timeout=60000)

    def acquire(self) -> None:
        if not self.lock.acquire():
            raise TimeoutError("pals Lock not acquired")

    def release(self) -> None:
        self.lock.release()

    def close(self) -> None:
        self.locker.engine.dispose()


class Statements:
    """Statements the server ran for the clients and the time it spent in them, from
    ``pg_stat_statements`` (its own reads left out), or NaN without the extension."""

    def __init__(self, admin: psycopg.Connection[Any]) -> None:
        self.admin = admin
        try:
            admin.execute(b"CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self.count()
            self.available = True
        except psycopg.Error:
            self.available = False

    def count(self) -> tuple[float, float]:
        row = self.admin.execute(
            b"SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0) "
            b"FROM pg_stat_statements "
            b"WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            b"AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_stat_activity%'"
        ).fetchone()
        return (float(row[0]), float(row[1])) if row else (0.0, 0.0)

    def reading(self) -> tuple[float, float]:
        """(statements, milliseconds the server spent executing them) so far."""
        return self.count() if self.available else (math.nan, math.nan)


@contextlib.contextmanager
def server(url: str | None, notes: list[str], skip: Callable[[str], None]) -> Iterator[str | None]:
    """A ``postgresql://`` URL of the superuser, or None (the reason passed to ``skip``)."""
    if url:
        notes.append(f"PostgreSQL: given, {urlsplit(url).hostname}:{urlsplit(url).port}")
        yield url
        return
    from semaphore_recipes.devtools.postgresql_server import PostgreSQLNotFound, PostgreSQLServer

    try:
        started = PostgreSQLServer(
            settings={"shared_preload_libraries": "pg_stat_statements"}
        ).start()
    except PostgreSQLNotFound as exc:
        skip(str(exc))
        yield None
        return
    with started:
        with psycopg.connect(started.url(), autocommit=True) as conn:
            row = conn.execute(b"SHOW server_version").fetchone()
        notes.append(
            f"PostgreSQL: started here, {row[0] if row else '?'} on {started.host_port}, "
            "fsync=off; clients are threads of one process"
        )
        yield started.url()


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    given = os.environ.get("SEMAPHORE_RECIPES_BENCH_POSTGRESQL")
    lines: list[str] = []
    with server(given, results.notes, lambda why: results.skip("postgresql", why)) as admin_url:
        if admin_url is None:
            return
        conninfo = admin_url
        run_id = uuid.uuid4().hex[:6]
        table = f"sr_bench_floor_{run_id}"
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f"CREATE TABLE {table} (k text PRIMARY KEY)".encode())
            statements = Statements(admin)
            if not statements.available:
                results.notes.append("PostgreSQL: no pg_stat_statements, so no statement counts")

            def url(app: str) -> str:
                return (
                    f"{admin_url}&schema=sr_bench_{run_id}&session_timeout={SESSION}"
                    f"&application_name={APP_PREFIX}{app}"
                )

            lines += latency(run, statements, conninfo, table, url, progress, results)
            lines += handoff(run, conninfo, url, progress, results)
            lines += herd(run, statements, conninfo, url, progress)
            lines += throughput(run, statements, conninfo, table, url, progress)
            admin.execute(f"DROP TABLE {table}".encode())
    results.postgresql_sections = lines


def verdict(ratio: float) -> str:
    return f"target <= {TARGET}x: **{'met' if ratio <= TARGET else 'missed'}**"


def optional_peers(
    conninfo: str, name: str, results: Results, what: str
) -> dict[str, Callable[[], Cycle]]:
    """The advisory-lock mutexes: ``pals`` only when it imports."""
    key = int.from_bytes(uuid.uuid4().bytes[:7], "big")
    peers: dict[str, Callable[[], Cycle]] = {
        "pg_advisory_lock / pg_advisory_unlock (one connection)": lambda: AdvisoryLock(
            conninfo, key
        ),
    }
    try:
        importlib.import_module("pals")
        importlib.import_module("sqlalchemy.dialects.postgresql.psycopg")
    except ImportError as exc:
        results.skip(f"postgresql {what}: pals Lock", f"not installed ({exc.name})")
        return peers
    sqlalchemy_url = "postgresql+psycopg://" + conninfo.removeprefix("postgresql://")
    peers["pals Lock (SQLAlchemy pool)"] = lambda: Pals(sqlalchemy_url, name)
    return peers


def latency(
    run: Run, statements: Statements, conninfo: str, table: str, url: Callable[[str], str],
    progress: Callable[[str], None], results: Results,
) -> list[str]:  # fmt: skip
    sizes = run.sizes
    impls: dict[str, Cycle] = {
        FLOOR: RawFloor(conninfo, table),
        "semaphore-recipes Semaphore (sync, one backend)": Ours(
            url("latency"), "latency", sizes.capacity
        ),
    }
    for label, make in optional_peers(conninfo, "latency", results, "latency").items():
        impls[label] = make()
    samples: dict[str, list[float]] = {k: [] for k in impls}
    sent: dict[str, float] = dict.fromkeys(impls, 0.0)
    server_ms: dict[str, float] = dict.fromkeys(impls, 0.0)
    for impl in impls.values():
        for _ in range(sizes.latency_warmup):
            impl.acquire()
            impl.release()
    for r in range(sizes.latency_rounds):
        progress(f"postgresql latency: round {r + 1}/{sizes.latency_rounds}")
        for label, impl in impls.items():
            before = statements.reading()
            for _ in range(sizes.latency_batch):
                start = time.perf_counter_ns()
                impl.acquire()
                impl.release()
                samples[label].append((time.perf_counter_ns() - start) / 1e6)
            after = statements.reading()
            sent[label] += after[0] - before[0]
            server_ms[label] += after[1] - before[1]
    for impl in impls.values():
        impl.close()
    floor = median(samples[FLOOR])
    ours = median(samples["semaphore-recipes Semaphore (sync, one backend)"])
    out = [
        "## PostgreSQL (issue 25)",
        "",
        "### Uncontended acquire+release",
        "",
        "| implementation | median ms | p99 ms | / floor | statements per cycle | "
        "server ms per cycle |",
        "|---|---|---|---|---|---|",
    ]
    for label, ms in samples.items():
        out.append(
            f"| {label} | {median(ms):.3f} | {percentile(ms, 99):.3f} | "
            f"{median(ms) / floor:.2f}x | {sent[label] / len(ms):.1f} | "
            f"{server_ms[label] / len(ms):.3f} |"
        )
    return [
        *out,
        "",
        f"semaphore-recipes / floor: {ours / floor:.2f}x ({verdict(ours / floor)}). "
        "Statements are those the clients sent and server ms the time the server spent "
        "executing them (`pg_stat_statements`, top level; BEGIN and COMMIT count as "
        "statements): the rest of a cycle is the network and the client.",
        "",
    ]


def handoff_ms(
    holder: Cycle, waiter: Cycle, samples: int, settle: float,
    progress: Callable[[str], None], what: str,
) -> list[float]:  # fmt: skip
    """Release -> the waiter's acquire returns, ``samples`` times."""
    out: list[float] = []
    for i in range(samples):
        progress(f"postgresql handoff: {what} {i + 1}/{samples}") if i % 50 == 0 else None
        holder.acquire()
        granted = [0]

        def wait(granted: list[int] = granted) -> None:
            waiter.acquire()
            granted[0] = time.perf_counter_ns()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(settle)
        start = time.perf_counter_ns()
        holder.release()
        t.join(60)
        out.append((granted[0] - start) / 1e6)
        waiter.release()
    holder.close()
    waiter.close()
    return out


def notify_floor(conninfo: str, samples: int, settle: float) -> list[float]:
    """``NOTIFY`` on one connection -> the ``LISTEN``ing one receives it."""
    channel = f"sr_bench_{uuid.uuid4().hex[:8]}"
    out: list[float] = []
    with (
        psycopg.connect(conninfo, autocommit=True) as sender,
        psycopg.connect(conninfo, autocommit=True) as listener,
    ):
        listener.execute(f'LISTEN "{channel}"'.encode())
        for _ in range(samples):
            got = [0]

            def receive(got: list[int] = got) -> None:
                for _ in listener.notifies(timeout=60, stop_after=1):
                    got[0] = time.perf_counter_ns()

            t = threading.Thread(target=receive)
            t.start()
            time.sleep(settle)
            start = time.perf_counter_ns()
            sender.execute(f'NOTIFY "{channel}"'.encode())
            t.join(60)
            out.append((got[0] - start) / 1e6)
    return out


def handoff(
    run: Run, conninfo: str, url: Callable[[str], str], progress: Callable[[str], None],
    results: Results,
) -> list[str]:  # fmt: skip
    sizes = run.sizes
    n, settle = sizes.handoff_samples, sizes.handoff_settle
    rows = {"raw notification floor (NOTIFY -> the LISTENing connection has it)": (
        notify_floor(conninfo, n, settle)
    )}  # fmt: skip
    ours = "semaphore-recipes Semaphore (holder and waiter in two backends)"
    rows[ours] = handoff_ms(
        Ours(url("handoff-holder"), "handoff", 1),
        Ours(url("handoff-waiter"), "handoff", 1),
        n, settle, progress, "semaphore-recipes",
    )  # fmt: skip
    for label, make in optional_peers(conninfo, "handoff", results, "handoff").items():
        rows[label] = handoff_ms(make(), make(), n, settle, progress, label.split()[0])
    floor = median(next(iter(rows.values())))
    ratio = median(rows[ours]) / floor
    return [
        "### Handoff (release -> the waiter's acquire returns)",
        "",
        "| implementation | median ms | p99 ms | / floor |",
        "|---|---|---|---|",
        *(
            f"| {label} | {median(ms):.3f} | {percentile(ms, 99):.3f} | {median(ms) / floor:.2f}x |"
            for label, ms in rows.items()
        ),
        "",
        f"semaphore-recipes / floor: {ratio:.2f}x ({verdict(ratio)}). The advisory locks' "
        "waiters block inside the server, which wakes them itself: no notification to "
        "read, and no queue order either.",
        "",
    ]


def connections_per_backend(conn: psycopg.Connection[Any], prefix: str) -> int:
    """The most connections any backend whose application_name starts with ``prefix``
    has open."""
    row = conn.execute(
        b"SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM pg_stat_activity "
        b"WHERE application_name LIKE %s GROUP BY application_name) AS per_backend",
        (prefix + "%",),
    ).fetchone()
    return int(row[0]) if row else 0


def herd(
    run: Run, statements: Statements, conninfo: str, url: Callable[[str], str],
    progress: Callable[[str], None],
) -> list[str]:  # fmt: skip
    faces = importlib.import_module("semaphore_recipes.testing.faces")
    out = [
        f"### Herd: server work per release, W waiters (capacity 1, {PER_BACKEND} per backend)",
        "",
        "| W | backends | releases | statements per release | notifications per release "
        "| connections per backend (most) |",
        "|---|---|---|---|---|---|",
    ]
    for waiters in run.sizes.server_herd_waiters:
        progress(f"postgresql herd: W={waiters}")
        name = f"herd-{waiters}"
        holder = Ours(url(f"holder-{waiters}"), name, 1)
        count = -(-waiters // PER_BACKEND)
        backends = [Ours(url(f"herd-{waiters}-{i}"), name, 1) for i in range(count)]
        holder.acquire()
        threads = []
        with psycopg.connect(conninfo, autocommit=True) as spy:
            for backend in backends:
                channel = faces.store_backend(backend.backend).keeper.channel
                spy.execute(f'LISTEN "{channel}"'.encode())
            for i in range(waiters):

                def cycle(sem: Any = backends[i // PER_BACKEND].semaphore) -> None:
                    sem.acquire(timeout=120).release()

                t = threading.Thread(target=cycle)
                t.start()
                threads.append(t)
            while len(holder.semaphore.status().waiters) < waiters:
                time.sleep(0.05)
            connections = connections_per_backend(spy, f"{APP_PREFIX}herd-{waiters}-")
            before = statements.reading()
            holder.release()
            for t in threads:
                t.join(120)
            sent = statements.reading()[0] - before[0]
            connections = max(
                connections, connections_per_backend(spy, f"{APP_PREFIX}herd-{waiters}-")
            )
            notified = sum(1 for _ in spy.notifies(timeout=1.0))
        out.append(
            f"| {waiters} | {count} | {waiters} | {sent / waiters:.2f} | "
            f"{notified / waiters:.2f} | {connections} |"
        )
        holder.close()
        for backend in backends:
            backend.close()
    out += [
        "",
        "Each grant is one statement (the waiter's release, which admits the next) and "
        "one notification, to the backend of the one waiter it admits; the holder's "
        "first release is the one more. A backend keeps one listening connection and a "
        "pool of at most four, whatever the number of its waiters (the connections are "
        "counted at the full queue and after the drain).",
        "",
    ]
    return out


def throughput(
    run: Run, statements: Statements, conninfo: str, table: str, url: Callable[[str], str],
    progress: Callable[[str], None],
) -> list[str]:  # fmt: skip
    sizes = run.sizes
    n = sizes.throughput_processes * sizes.throughput_clients
    rows = []
    for label, make in (
        ("raw INSERT + DELETE loop (a connection per thread)", lambda i: RawFloor(conninfo, table)),
        (
            "semaphore-recipes Semaphore (a backend per thread)",
            lambda i: Ours(url(f"throughput-{i}"), "throughput", sizes.capacity),
        ),
    ):
        progress(f"postgresql throughput: {label}")
        impls = [make(i) for i in range(n)]
        counts = [0] * n
        stop = threading.Event()

        def loop(
            i: int, impl: Cycle, stop: threading.Event = stop, counts: list[int] = counts
        ) -> None:
            while not stop.is_set():
                impl.acquire()
                impl.release()
                counts[i] += 1

        threads = [threading.Thread(target=loop, args=(i, c)) for i, c in enumerate(impls)]
        before = statements.reading()
        start = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(sizes.throughput_seconds)
        stop.set()
        for t in threads:
            t.join(60)
        elapsed = time.monotonic() - start
        sent = statements.reading()[0] - before[0]
        for impl in impls:
            impl.close()
        grants = sum(counts)
        rows.append((label, grants / elapsed, sent / grants if grants else float("nan")))
    floor = rows[0][1]
    return [
        f"### Throughput ({n} client threads, capacity {sizes.capacity})",
        "",
        "| implementation | grants/s | / raw loop | statements per grant |",
        "|---|---|---|---|",
        *(f"| {label} | {ops:.0f} | {ops / floor:.2f}x | {per:.1f} |" for label, ops, per in rows),
        "",
        "Every step of a semaphore locks its row, so the steps of all clients on one "
        "semaphore run one after another; the floor's rows are independent of each other.",
        "",
    ]
