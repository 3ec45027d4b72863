"""The MySQL/MariaDB backend (issue 26) against raw MySQL floors and named locks.

Starts a MariaDB of its own on loopback (the test server's settings: binary log on, the
redo log synced once a second; more connections allowed for the herd); unless
``SEMAPHORE_RECIPES_BENCH_MYSQL`` gives a ``mysql://user:password@host:port`` URL of a
user that may create databases and ``KILL QUERY`` the run's connections (each part of
the run uses a database of its own, ``sr_bench_*``, dropped at the end). Clients are
threads of this process, each backend with connections of its own (as in the Redis and
PostgreSQL figures: comparable with each other, not with the ZooKeeper and etcd ones,
whose clients are processes). The server's statement counts are deltas of ``SHOW
GLOBAL STATUS``, so nothing else may use the server during a run.

* uncontended acquire+release (sync face, one backend) against ``INSERT`` + ``DELETE``
  of one row on one autocommit PyMySQL connection (the floor), a ``GET_LOCK`` mutex on
  one connection (the peer "MySQL named lock") and, when ``MySQLdb`` imports, the same
  floor on ``mysqlclient`` (the C driver: what pure-Python PyMySQL costs);
* handoff: a holder releases, a waiter of another backend returns from ``acquire``,
  against a ``GET_LOCK`` waiter on one connection returning when another connection's
  ``RELEASE_LOCK`` frees the lock (the floor, and the named-lock peer);
* herd: W waiters (capacity 1, :data:`PER_BACKEND` threads per backend), each releasing
  at once when granted: statements, procedure calls and ``KILL``\\ s per release, and
  connections per backend, which must not grow with W;
* throughput: client threads cycling on capacity C, against the floor's loop.

A lost connection fails the measurement (the run reports it as an error).
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
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit

import pymysql

from .config import Run
from .results import Results, median, percentile
from .servers import ServerSet

SESSION = 60  # s: no session renewal or timed look falls inside a measurement
PER_BACKEND = 50  # herd: waiting threads per backend
TARGET = 1.3  # the bound on the ratio to the raw floor
LOCK_WAIT = 10  # s: GET_LOCK's timeout (a handoff never comes near it)
MAX_CONNECTIONS = "2000"  # the herd at W=1000 and the throughput's backends, with room
FLOOR = "raw INSERT + DELETE, one PyMySQL connection (the floor)"
OURS = "semaphore-recipes Semaphore (sync, one backend)"
NAMED_LOCK = "MySQL named lock (GET_LOCK / RELEASE_LOCK, one connection)"
HANDOFF_FLOOR = (
    "MySQL named lock: GET_LOCK returns on another connection's RELEASE_LOCK (the floor)"
)
#: the server's counters read around each measurement (SHOW GLOBAL STATUS)
COUNTERS = ("Questions", "Queries", "Com_call_procedure", "Com_kill")


class Cycle(Protocol):
    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Server:
    """Where the run's MySQL is and who it logs in as."""

    host: str
    port: int
    user: str
    password: str

    def connect(self, database: str | None = None) -> pymysql.connections.Connection[Any]:
        return pymysql.connect(
            host=self.host, port=self.port, user=self.user, password=self.password,
            database=database, autocommit=True,
        )  # fmt: skip

    def url(self, database: str) -> str:
        """The backend's ``mysql://`` URL of ``database``."""
        login = quote(self.user, safe="") + (
            f":{quote(self.password, safe='')}" if self.password else ""
        )
        return f"mysql://{login}@{self.host}:{self.port}/{database}?session_timeout={SESSION}"


class RawFloor:
    """One row inserted, then deleted, on one autocommit connection: two statements,
    two transactions, the least a lock kept in a table can cost."""

    def __init__(self, conn: Any, table: str) -> None:
        self.conn = conn
        self.cursor = conn.cursor()
        self.key = uuid.uuid4().hex
        self.insert = f"INSERT INTO {table} (k) VALUES (%s)"
        self.delete = f"DELETE FROM {table} WHERE k = %s"

    def acquire(self) -> None:
        self.cursor.execute(self.insert, (self.key,))

    def release(self) -> None:
        self.cursor.execute(self.delete, (self.key,))

    def close(self) -> None:
        self.conn.close()


class NamedLock:
    """``GET_LOCK(name, timeout)`` / ``RELEASE_LOCK(name)`` on one connection: a mutex
    whose waiters block in the server; no queue order, no capacity, held while the
    connection lives."""

    def __init__(self, conn: pymysql.connections.Connection[Any], name: str) -> None:
        self.conn = conn
        self.cursor = conn.cursor()
        self.name = name

    def acquire(self) -> None:
        self.cursor.execute("SELECT GET_LOCK(%s, %s)", (self.name, LOCK_WAIT))
        row = self.cursor.fetchone()
        if not row or row[0] != 1:
            raise TimeoutError(f"GET_LOCK({self.name!r}) did not take the lock: {row}")

    def release(self) -> None:
        self.cursor.execute("SELECT RELEASE_LOCK(%s)", (self.name,))
        self.cursor.fetchone()

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


class Counters:
    """The server's statement counters (:data:`COUNTERS`), read on the admin connection;
    a reading's own statement is left out of the deltas."""

    def __init__(self, admin: pymysql.connections.Connection[Any]) -> None:
        self.admin = admin

    def reading(self) -> dict[str, float]:
        with self.admin.cursor() as cursor:
            names = ", ".join(f"'{name}'" for name in COUNTERS)
            cursor.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
            return {str(name): float(value) for name, value in cursor.fetchall()}

    def since(self, before: dict[str, float]) -> dict[str, float]:
        """What the clients ran since ``before`` (the second reading's own SHOW left out)."""
        after = self.reading()
        own = {"Questions": 1.0, "Queries": 1.0}
        return {k: after[k] - before[k] - own.get(k, 0.0) for k in COUNTERS}


def connections_in(admin: pymysql.connections.Connection[Any], database: str) -> int:
    """Connections whose default database is ``database``."""
    with admin.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE db = %s", (database,)
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def waiting_entries(admin: pymysql.connections.Connection[Any], database: str) -> int:
    """Entries waiting in ``database`` (read from the table: the library's ``status()``
    fails on a queue this long, see docs/benchmarks.md)."""
    with admin.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM `{database}`.sr_entries WHERE held = 0")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def server(
    url: str | None, notes: list[str], skip: Callable[[str], None]
) -> Iterator[Server | None]:
    """The run's server, or None (the reason passed to ``skip``)."""
    if url:
        parts = urlsplit(url)
        given = Server(
            parts.hostname or "127.0.0.1",
            parts.port or 3306,
            unquote(parts.username or "root"),
            unquote(parts.password or ""),
        )
        notes.append(f"MySQL: given, {given.host}:{given.port}; clients are threads of one process")
        yield given
        return
    from semaphore_recipes.devtools.mysql_server import MariaDBNotFound, MariaDBServer

    try:
        started = MariaDBServer(settings={"max_connections": MAX_CONNECTIONS}).start()
    except MariaDBNotFound as exc:
        skip(str(exc))
        yield None
        return
    with started:
        host, port = started.host_port.rsplit(":", 1)
        ours = Server(host, int(port), "root", "")
        with ours.connect() as conn, conn.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            row = cursor.fetchone()
        notes.append(
            f"MySQL: started here, MariaDB {row[0] if row else '?'} on {started.host_port} "
            "(binary log on, redo log synced once a second); clients are threads of one process"
        )
        yield ours


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    given = os.environ.get("SEMAPHORE_RECIPES_BENCH_MYSQL")
    lines: list[str] = []
    with server(given, results.notes, lambda why: results.skip("mysql", why)) as srv:
        if srv is None:
            return
        run_id = uuid.uuid4().hex[:6]
        databases: list[str] = []

        def database(part: str) -> str:
            name = f"sr_bench_{run_id}_{part}"
            with admin.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE `{name}`")
            databases.append(name)
            return name

        with srv.connect() as admin:
            try:
                main = database("main")
                with admin.cursor() as cursor:
                    cursor.execute(f"CREATE TABLE `{main}`.floor (k VARCHAR(64) PRIMARY KEY)")
                counters = Counters(admin)
                lines += latency(run, srv, counters, main, progress, results)
                lines += handoff(run, srv, main, progress)
                lines += herd(run, srv, counters, admin, database, progress)
                lines += throughput(run, srv, counters, main, progress)
            finally:
                with admin.cursor() as cursor:
                    for name in databases:
                        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    results.mysql_sections = lines


def verdict(ratio: float) -> str:
    return f"target <= {TARGET}x: **{'met' if ratio <= TARGET else 'missed'}**"


def mysqlclient_floor(srv: Server, main: str, results: Results) -> RawFloor | None:
    """The floor on ``mysqlclient`` (``MySQLdb``, libmariadb/libmysqlclient), if it imports."""
    try:
        mysqldb = importlib.import_module("MySQLdb")
    except ImportError as exc:
        results.skip("mysql latency: mysqlclient floor", f"not installed ({exc.name})")
        return None
    conn = mysqldb.connect(host=srv.host, port=srv.port, user=srv.user, password=srv.password,
                           database=main, autocommit=True)  # fmt: skip
    return RawFloor(conn, "floor")


def latency(
    run: Run, srv: Server, counters: Counters, main: str,
    progress: Callable[[str], None], results: Results,
) -> list[str]:  # fmt: skip
    sizes = run.sizes
    impls: dict[str, Cycle] = {
        FLOOR: RawFloor(srv.connect(main), "floor"),
        OURS: Ours(srv.url(main), "latency", sizes.capacity),
        NAMED_LOCK: NamedLock(srv.connect(main), f"sr-bench-{uuid.uuid4().hex[:8]}"),
    }
    c_floor = mysqlclient_floor(srv, main, results)
    if c_floor is not None:
        impls["raw INSERT + DELETE, one mysqlclient connection (C driver)"] = c_floor
    samples: dict[str, list[float]] = {k: [] for k in impls}
    ran: dict[str, dict[str, float]] = {k: dict.fromkeys(COUNTERS, 0.0) for k in impls}
    for impl in impls.values():
        for _ in range(sizes.latency_warmup):
            impl.acquire()
            impl.release()
    for r in range(sizes.latency_rounds):
        progress(f"mysql latency: round {r + 1}/{sizes.latency_rounds}")
        for label, impl in impls.items():
            before = counters.reading()
            for _ in range(sizes.latency_batch):
                start = time.perf_counter_ns()
                impl.acquire()
                impl.release()
                samples[label].append((time.perf_counter_ns() - start) / 1e6)
            for k, v in counters.since(before).items():
                ran[label][k] += v
    for impl in impls.values():
        impl.close()
    floor = median(samples[FLOOR])
    ours = median(samples[OURS])
    out = [
        "## MySQL/MariaDB (issue 26)",
        "",
        "### Uncontended acquire+release",
        "",
        "| implementation | median ms | p99 ms | / floor | statements per cycle "
        "| CALLs per cycle, nested ones too | statements run per cycle, in procedures too |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, ms in samples.items():
        n = len(ms)
        c = ran[label]
        out.append(
            f"| {label} | {median(ms):.3f} | {percentile(ms, 99):.3f} | "
            f"{median(ms) / floor:.2f}x | {c['Questions'] / n:.1f} | "
            f"{c['Com_call_procedure'] / n:.1f} | {c['Queries'] / n:.1f} |"
        )
    return [
        *out,
        "",
        f"semaphore-recipes / floor: {ours / floor:.2f}x ({verdict(ours / floor)}). "
        "Statements are those the clients sent (`Questions`), CALLs the procedure calls "
        "run, those a procedure makes too (`Com_call_procedure`), and statements run "
        "those the server executed, each statement inside a procedure too (`Queries`).",
        "",
    ]


def handoff_ms(
    holder: Cycle, waiter: Cycle, samples: int, settle: float,
    progress: Callable[[str], None], what: str,
) -> list[float]:  # fmt: skip
    """Release -> the waiter's acquire returns, ``samples`` times."""
    out: list[float] = []
    for i in range(samples):
        progress(f"mysql handoff: {what} {i + 1}/{samples}") if i % 50 == 0 else None
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
        if not granted[0]:
            raise TimeoutError(f"{what}: the waiter was not granted within 60 s")
        out.append((granted[0] - start) / 1e6)
        waiter.release()
    holder.close()
    waiter.close()
    return out


def handoff(run: Run, srv: Server, main: str, progress: Callable[[str], None]) -> list[str]:
    sizes = run.sizes
    n, settle = sizes.handoff_samples, sizes.handoff_settle
    lock = f"sr-bench-{uuid.uuid4().hex[:8]}"
    rows = {
        HANDOFF_FLOOR: handoff_ms(
            NamedLock(srv.connect(main), lock), NamedLock(srv.connect(main), lock),
            n, settle, progress, "GET_LOCK",
        ),
    }  # fmt: skip
    ours = "semaphore-recipes Semaphore (holder and waiter in two backends)"
    rows[ours] = handoff_ms(
        Ours(srv.url(main), "handoff", 1), Ours(srv.url(main), "handoff", 1),
        n, settle, progress, "semaphore-recipes",
    )  # fmt: skip
    floor = median(rows[HANDOFF_FLOOR])
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
        f"semaphore-recipes / floor: {ratio:.2f}x ({verdict(ratio)}). The named lock's "
        "waiter blocks inside the server, which wakes it itself (the floor is also the "
        'peer "MySQL named lock"): no notice to read, no queue order, no capacity. A '
        "semaphore-recipes waiter learns of its grant from a notice that the releasing "
        "step writes and its `KILL QUERY` makes the waiting backend's keeper read.",
        "",
    ]


def herd(
    run: Run, srv: Server, counters: Counters, admin: pymysql.connections.Connection[Any],
    database: Callable[[str], str], progress: Callable[[str], None],
) -> list[str]:  # fmt: skip
    out = [
        f"### Herd: server work per release, W waiters (capacity 1, {PER_BACKEND} per backend)",
        "",
        "| W | backends | releases | statements per release | CALLs per release, nested too "
        "| KILLs per release | statements run per release, in procedures too "
        "| connections per backend (full queue / drained) | drain s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for waiters in run.sizes.server_herd_waiters:
        progress(f"mysql herd: W={waiters}")
        db = database(f"herd{waiters}")
        url = srv.url(db)
        holder = Ours(url, "herd", 1)
        holder.acquire()
        own = connections_in(admin, db)  # the holder's, left out of the per-backend figure
        count = -(-waiters // PER_BACKEND)
        backends = [Ours(url, "herd", 1) for _ in range(count)]
        threads = []
        for i in range(waiters):

            def cycle(sem: Any = backends[i // PER_BACKEND].semaphore) -> None:
                sem.acquire(timeout=120).release()

            t = threading.Thread(target=cycle)
            t.start()
            threads.append(t)
        while waiting_entries(admin, db) < waiters:
            time.sleep(0.05)
        queued = (connections_in(admin, db) - own) / count
        before = counters.reading()
        start = time.monotonic()
        holder.release()
        for t in threads:
            t.join(120)
        drain = time.monotonic() - start
        ran = counters.since(before)
        drained = (connections_in(admin, db) - own) / count
        out.append(
            f"| {waiters} | {count} | {waiters} | {ran['Questions'] / waiters:.2f} | "
            f"{ran['Com_call_procedure'] / waiters:.2f} | {ran['Com_kill'] / waiters:.2f} | "
            f"{ran['Queries'] / waiters:.1f} | {queued:.1f} / {drained:.1f} | {drain:.2f} |"
        )
        holder.close()
        for backend in backends:
            backend.close()
    out += [
        "",
        "Counted from the holder's release to the last waiter's; the holder's release is "
        "the one more. Connections are those in `information_schema.processlist` with the "
        "herd's database, less the holder's, divided by the backends: each keeps one "
        "waiting connection (its keeper), a background one and a pool of at most four, "
        "whatever the number of its waiters.",
        "",
    ]
    return out


def throughput(
    run: Run, srv: Server, counters: Counters, main: str, progress: Callable[[str], None]
) -> list[str]:
    sizes = run.sizes
    n = sizes.throughput_processes * sizes.throughput_clients
    rows = []
    for label, make in (
        ("raw INSERT + DELETE loop (a PyMySQL connection per thread)",
         lambda i: RawFloor(srv.connect(main), "floor")),
        ("semaphore-recipes Semaphore (a backend per thread)",
         lambda i: Ours(srv.url(main), "throughput", sizes.capacity)),
    ):  # fmt: skip
        progress(f"mysql throughput: {label}")
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
        before = counters.reading()
        start = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(sizes.throughput_seconds)
        stop.set()
        for t in threads:
            t.join(60)
        elapsed = time.monotonic() - start
        ran = counters.since(before)
        for impl in impls:
            impl.close()
        grants = sum(counts)
        per = ran["Questions"] / grants if grants else math.nan
        rows.append((label, grants / elapsed, per))
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
