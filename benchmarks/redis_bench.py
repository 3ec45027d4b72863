"""The Redis backend (issue 17) against raw Redis floors and the locks users pick.

Starts a ``redis-server`` of its own on loopback (no persistence: a benchmark of the
protocol, not of the disk), unless ``SEMAPHORE_RECIPES_BENCH_REDIS=host:port`` names
one. Clients are threads
of this process, each with connections of its own (the ZooKeeper and etcd figures use a
process per client: these are not comparable with them, only with each other).

* uncontended acquire+release, against a raw ``SET NX PX`` + ``DEL`` (the floor), redis-py's
  ``Lock``, ``python-redis-lock`` and ``py-redis-semaphore`` (when installed: both are
  benchmark-only dependencies, see ``pyproject.toml``'s ``bench`` extra); the server's
  commands per cycle come from ``INFO stats`` (one command more for the read itself).
  The same from asyncio (``sr.aio``) against ``redis.asyncio``'s floor, redis-py's
  asyncio ``Lock`` and py-redis-semaphore's ``aacquire``/``arelease``. (The unrelated
  2016 ``redis-semaphore`` imports as ``redis_semaphore`` too, and its wheel installs a
  top-level ``tests`` package: it is not measured.)
* handoff: a holder releases, a waiter of another backend returns from ``acquire``,
  against the raw notification floor (``RPUSH`` -> a ``BLPOP`` on another connection);
* herd: W waiters (one backend each), capacity 1, each releasing at once when granted:
  scripts, pushed messages and reads per release, which must stay flat in W;
* throughput: clients cycling on capacity 10, against the raw floor's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .config import Run
from .results import Results, median, percentile
from .servers import ServerSet

SESSION = 60  # s: no lease renewal or timed look falls inside a measurement
PER_BACKEND = 50  # herd: waiting threads per backend (one inbox, one notifier thread)


class Cycle(Protocol):
    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def close(self) -> None: ...


class RawFloor:
    """A key set with NX and a TTL, then deleted: the least a lock can send."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.key = f"bench-raw:{name}:{uuid.uuid4().hex}"

    def acquire(self) -> None:
        if not self.client.set(self.key, b"1", nx=True, px=SESSION * 1000):
            raise RuntimeError("the floor's key exists")

    def release(self) -> None:
        self.client.delete(self.key)

    def close(self) -> None:
        self.client.close()


class Ceiling:
    """Not a semaphore: each cycle sends what a contended FIFO acquire whose server
    decides must send (a script that enqueues, a read of the admission message, a
    script that dequeues and pushes the next one), and never waits: the message its
    read takes is the one its previous release pushed to its own inbox."""

    ENQUEUE = "return redis.call('zadd', KEYS[1], ARGV[1], ARGV[2])"
    RELEASE = "redis.call('zrem', KEYS[1], ARGV[1]) return redis.call('rpush', KEYS[2], '1')"

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.queue = "bench-ceiling:q"
        self.member = f"{name}:{uuid.uuid4().hex}"
        self.inbox = f"bench-ceiling:inbox:{self.member}"
        self.enqueue = client.register_script(self.ENQUEUE)
        self.dequeue = client.register_script(self.RELEASE)
        self.order = 0
        client.rpush(self.inbox, b"1")  # the first admission message

    def acquire(self) -> None:
        self.order += 1
        self.enqueue(keys=[self.queue], args=[self.order, self.member])
        if self.client.blpop([self.inbox], timeout=1) is None:
            raise RuntimeError("the ceiling's message is missing")

    def release(self) -> None:
        self.dequeue(keys=[self.queue, self.inbox], args=[self.member])

    def close(self) -> None:
        self.client.delete(self.inbox)
        self.client.close()


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


class RedisPyLock:
    """redis-py's ``Lock`` (a mutex with a TTL; no queue, waiters poll)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.lock = client.lock(f"bench-lock:{name}", timeout=SESSION, blocking_timeout=60)

    def acquire(self) -> None:
        if not self.lock.acquire():
            raise TimeoutError("redis-py Lock not acquired")

    def release(self) -> None:
        self.lock.release()

    def close(self) -> None:
        self.client.close()


class PythonRedisLock:
    """``python-redis-lock`` (a mutex; waiters block on a signal list)."""

    def __init__(self, client: Any, name: str) -> None:
        redis_lock = importlib.import_module("redis_lock")
        self.client = client
        self.lock = redis_lock.Lock(client, f"bench-prl:{name}", expire=SESSION)

    def acquire(self) -> None:
        if not self.lock.acquire(timeout=60):
            raise TimeoutError("python-redis-lock not acquired")

    def release(self) -> None:
        self.lock.release()

    def close(self) -> None:
        self.client.close()


class PyRedisSemaphore:
    """``py-redis-semaphore`` (a sorted set of holders with a TTL, a fencing counter and a
    heartbeat thread per holder; waiters block on a list; no FIFO beyond BLPOP's)."""

    def __init__(self, client: Any, name: str, capacity: int) -> None:
        mod = importlib.import_module("redis_semaphore")
        if not hasattr(mod, "SemaphoreConfig"):  # the 2016 package of the same module name
            raise ImportError(
                "redis_semaphore is not py-redis-semaphore", name="py-redis-semaphore"
            )
        self.client = client
        config = mod.SemaphoreConfig(
            name=f"bench-prs:{name}", limit=capacity, lock_timeout=SESSION, acquire_timeout=60
        )
        self.semaphore = mod.Semaphore(client, config)

    def acquire(self) -> None:
        if not self.semaphore.acquire().success:
            raise TimeoutError("py-redis-semaphore not acquired")

    def release(self) -> None:
        self.semaphore.release()

    def close(self) -> None:
        self.client.close()


class AioCycle(Protocol):
    async def acquire(self) -> None: ...
    async def release(self) -> None: ...
    async def close(self) -> None: ...


class AioRawFloor:
    """The floor from asyncio: ``SET NX PX`` + ``DEL`` on a ``redis.asyncio`` client."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.key = f"bench-aio-raw:{name}:{uuid.uuid4().hex}"

    async def acquire(self) -> None:
        if not await self.client.set(self.key, b"1", nx=True, px=SESSION * 1000):
            raise RuntimeError("the floor's key exists")

    async def release(self) -> None:
        await self.client.delete(self.key)

    async def close(self) -> None:
        await self.client.aclose()


class AioOurs:
    def __init__(self, backend: Any, name: str, capacity: int) -> None:
        self.backend = backend
        self.semaphore = backend.semaphore(name, capacity=capacity)
        self.permit: Any = None

    async def acquire(self) -> None:
        self.permit = await self.semaphore.acquire(timeout=60)

    async def release(self) -> None:
        await self.permit.release()

    async def close(self) -> None:
        await self.backend.close()


class AioRedisPyLock:
    """redis-py's asyncio ``Lock``."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.lock = client.lock(f"bench-aio-lock:{name}", timeout=SESSION, blocking_timeout=60)

    async def acquire(self) -> None:
        if not await self.lock.acquire():
            raise TimeoutError("redis-py asyncio Lock not acquired")

    async def release(self) -> None:
        await self.lock.release()

    async def close(self) -> None:
        await self.client.aclose()


class AioPyRedisSemaphore:
    """``py-redis-semaphore`` from asyncio (``aacquire``/``arelease``)."""

    def __init__(self, client: Any, name: str, capacity: int) -> None:
        self.sync = PyRedisSemaphore(client, name, capacity)

    async def acquire(self) -> None:
        if not (await self.sync.semaphore.aacquire()).success:
            raise TimeoutError("py-redis-semaphore not acquired")

    async def release(self) -> None:
        await self.sync.semaphore.arelease()

    async def close(self) -> None:
        await self.sync.client.aclose()


def commands(admin: Any) -> float:
    return float(admin.info("stats")["total_commands_processed"])


def command_calls(admin: Any) -> dict[str, float]:
    stats = admin.info("commandstats")
    return {k.removeprefix("cmdstat_"): float(v["calls"]) for k, v in stats.items()}


@contextlib.contextmanager
def server(address: str | None, notes: list[str]) -> Iterator[str]:
    if address:
        notes.append(f"Redis: given, {address}")
        yield address.removeprefix("redis://").split("/", 1)[0]
        return
    from semaphore_recipes.devtools.redis_server import RedisServer

    with RedisServer().start() as started:
        version = (started.command_reply(b"INFO server", whole=True) or "").split(
            "redis_version:", 1
        )
        notes.append(
            f"Redis: started here, {version[1].split()[0] if len(version) > 1 else '?'} "
            f"on {started.host_port}, no persistence; clients are threads of one process"
        )
        yield started.host_port


def measure(
    run: Run, servers: ServerSet, results: Results, progress: Callable[[str], None]
) -> None:
    import redis

    lines: list[str] = []
    with server(os.environ.get("SEMAPHORE_RECIPES_BENCH_REDIS"), results.notes) as host_port:
        host, port = host_port.rsplit(":", 1)

        def client() -> Any:
            return redis.Redis(host=host, port=int(port))

        admin = client()
        prefix = f"sr-bench-{uuid.uuid4().hex[:6]}"
        url = f"redis://{host_port}/0?prefix={prefix}&session_timeout={SESSION}"
        lines += latency(run, admin, client, url, progress, results)
        lines += aio_latency(run, admin, host_port, url, progress, results)
        lines += handoff(run, client, url, progress)
        lines += herd(run, admin, url, progress)
        lines += throughput(run, client, url, progress)
        admin.close()
    results.redis_sections = lines


FLOOR = "raw SET NX PX + DEL (the floor)"


class Tally:
    """What one latency table gathers per implementation: cycle times (ms), and the
    server's commands and scripts during them."""

    def __init__(self, labels: list[str]) -> None:
        self.samples: dict[str, list[float]] = {k: [] for k in labels}
        self.sent = dict.fromkeys(labels, 0.0)
        self.scripts = dict.fromkeys(labels, 0.0)

    def begin(self, admin: Any) -> tuple[float, dict[str, float]]:
        return commands(admin), command_calls(admin)

    def end(self, admin: Any, label: str, begun: tuple[float, dict[str, float]]) -> None:
        before, calls = begun
        after = command_calls(admin)
        self.sent[label] += commands(admin) - before - 2  # (the two INFO reads)
        self.scripts[label] += sum(after.get(c, 0) - calls.get(c, 0) for c in ("evalsha", "eval"))

    def rows(self) -> list[str]:
        floor = median(self.samples[FLOOR])
        out = [
            "| implementation | median ms | p99 ms | / floor | scripts per cycle | "
            "commands per cycle, those in scripts too |",
            "|---|---|---|---|---|---|",
        ]
        for label, ms in self.samples.items():
            per, scripts = self.sent[label] / len(ms), self.scripts[label] / len(ms)
            out.append(
                f"| {label} | {median(ms):.3f} | {percentile(ms, 99):.3f} | "
                f"{median(ms) / floor:.2f}x | {scripts:.1f} | {per:.1f} |"
            )
        return out


def latency(
    run: Run, admin: Any, client: Callable[[], Any], url: str, progress: Callable[[str], None],
    results: Results,
) -> list[str]:  # fmt: skip
    sizes = run.sizes
    impls: dict[str, Cycle] = {
        FLOOR: RawFloor(client(), "lat"),
        "semaphore-recipes Semaphore": Ours(url, "lat", run.sizes.capacity),
        "redis-py Lock": RedisPyLock(client(), "lat"),
    }
    for label, make in (
        ("python-redis-lock Lock", lambda: PythonRedisLock(client(), "lat")),
        ("py-redis-semaphore Semaphore", lambda: PyRedisSemaphore(client(), "lat", 10)),
    ):
        try:
            impls[label] = make()
        except ImportError as exc:
            results.skip(f"redis latency: {label}", f"not installed ({exc.name})")
    tally = Tally(list(impls))
    for impl in impls.values():
        for _ in range(sizes.latency_warmup):
            impl.acquire()
            impl.release()
    for r in range(sizes.latency_rounds):
        progress(f"redis latency: round {r + 1}/{sizes.latency_rounds}")
        for label, impl in impls.items():
            begun = tally.begin(admin)
            for _ in range(sizes.latency_batch):
                start = time.perf_counter_ns()
                impl.acquire()
                impl.release()
                tally.samples[label].append((time.perf_counter_ns() - start) / 1e6)
            tally.end(admin, label, begun)
    for impl in impls.values():
        impl.close()
    return [
        "## Redis (issue 17)",
        "",
        "### Uncontended acquire+release",
        "",
        *tally.rows(),
        "",
        "A script is one round trip; the server runs the commands inside it without "
        "another one (Redis counts them in its statistics all the same).",
        "",
    ]


def aio_latency(
    run: Run, admin: Any, host_port: str, url: str, progress: Callable[[str], None],
    results: Results,
) -> list[str]:  # fmt: skip
    """The uncontended cycle from asyncio, each implementation on a ``redis.asyncio``
    client of its own, in one event loop (the admin's reads between batches block it
    while no cycle is running)."""
    import redis.asyncio

    host, port = host_port.rsplit(":", 1)

    def client() -> Any:
        return redis.asyncio.Redis(host=host, port=int(port))

    async def measure() -> Tally:
        sr = importlib.import_module("semaphore_recipes")
        sizes = run.sizes
        impls: dict[str, AioCycle] = {
            FLOOR: AioRawFloor(client(), "aio-lat"),
            "semaphore-recipes Semaphore (sr.aio)": AioOurs(
                await sr.aio.connect(url), "aio-lat", sizes.capacity
            ),
            "redis-py asyncio Lock": AioRedisPyLock(client(), "aio-lat"),
        }
        try:
            impls["py-redis-semaphore Semaphore (aacquire)"] = AioPyRedisSemaphore(
                client(), "aio-lat", 10
            )
        except ImportError as exc:
            results.skip("redis asyncio latency: py-redis-semaphore", f"not installed ({exc.name})")
        tally = Tally(list(impls))
        for impl in impls.values():
            for _ in range(sizes.latency_warmup):
                await impl.acquire()
                await impl.release()
        for r in range(sizes.latency_rounds):
            progress(f"redis asyncio latency: round {r + 1}/{sizes.latency_rounds}")
            for label, impl in impls.items():
                begun = tally.begin(admin)
                for _ in range(sizes.latency_batch):
                    start = time.perf_counter_ns()
                    await impl.acquire()
                    await impl.release()
                    tally.samples[label].append((time.perf_counter_ns() - start) / 1e6)
                tally.end(admin, label, begun)
        await asyncio.gather(*(impl.close() for impl in impls.values()))
        return tally

    tally = asyncio.run(measure())
    return [
        "### Uncontended acquire+release from asyncio",
        "",
        *tally.rows(),
        "",
        "The floor here is the same two commands awaited on a `redis.asyncio` client.",
        "",
    ]


def handoff(
    run: Run, client: Callable[[], Any], url: str, progress: Callable[[str], None]
) -> list[str]:
    sizes = run.sizes
    holder, waiter = Ours(url, "handoff", 1), Ours(url, "handoff", 1)
    ours: list[float] = []
    for i in range(sizes.handoff_samples):
        progress(f"redis handoff: {i + 1}/{sizes.handoff_samples}") if i % 50 == 0 else None
        holder.acquire()
        done = threading.Event()
        granted = [0]

        def wait(granted: list[int] = granted, done: threading.Event = done) -> None:
            waiter.acquire()
            granted[0] = time.perf_counter_ns()
            done.set()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(sizes.handoff_settle)
        start = time.perf_counter_ns()
        holder.release()
        done.wait(60)
        t.join()
        ours.append((granted[0] - start) / 1e6)
        waiter.release()
    holder.close()
    waiter.close()
    pusher, popper = client(), client()
    key = f"bench-floor:{uuid.uuid4().hex}"
    floor: list[float] = []
    for _ in range(sizes.handoff_samples):
        got = [0]

        def pop(got: list[int] = got) -> None:
            popper.blpop([key], timeout=60)
            got[0] = time.perf_counter_ns()

        t = threading.Thread(target=pop)
        t.start()
        time.sleep(sizes.handoff_settle)
        start = time.perf_counter_ns()
        pusher.rpush(key, b"x")
        t.join()
        floor.append((got[0] - start) / 1e6)
    pusher.close()
    popper.close()
    return [
        "### Handoff (release -> the waiter's acquire returns)",
        "",
        "| implementation | median ms | p99 ms | / floor |",
        "|---|---|---|---|",
        f"| raw notification floor (RPUSH -> BLPOP returns) | {median(floor):.3f} | "
        f"{percentile(floor, 99):.3f} | 1.00x |",
        f"| semaphore-recipes Semaphore | {median(ours):.3f} | {percentile(ours, 99):.3f} | "
        f"{median(ours) / median(floor):.2f}x |",
        "",
    ]


def herd(run: Run, admin: Any, url: str, progress: Callable[[str], None]) -> list[str]:
    out = [
        f"### Herd: server work per release, W waiters (capacity 1, {PER_BACKEND} per backend)",
        "",
        "| W | releases | scripts per release | messages pushed per release | "
        "inbox reads per release | all commands per release |",
        "|---|---|---|---|---|---|",
    ]
    for waiters in run.sizes.herd_waiters:
        progress(f"redis herd: W={waiters}")
        name = f"herd-{waiters}"
        holder = Ours(url, name, 1)
        # 50 waiting threads per backend, as the herd tests' worker processes have
        backends = [Ours(url, name, 1) for _ in range(-(-waiters // PER_BACKEND))]
        holder.acquire()
        threads = []
        for i in range(waiters):

            def cycle(sem: Any = backends[i // PER_BACKEND].semaphore) -> None:
                sem.acquire(timeout=120).release()

            t = threading.Thread(target=cycle)
            t.start()
            threads.append(t)
        while len(holder.semaphore.status().waiters) < waiters:
            time.sleep(0.05)
        before, total_before = command_calls(admin), commands(admin)
        holder.release()
        for t in threads:
            t.join(120)
        after, total_after = command_calls(admin), commands(admin)

        def per(
            cmd: str,
            after: dict[str, float] = after,
            before: dict[str, float] = before,
            waiters: int = waiters,
        ) -> float:
            return (after.get(cmd, 0.0) - before.get(cmd, 0.0)) / waiters

        scripts = per("evalsha") + per("eval")
        out.append(
            f"| {waiters} | {waiters} | {scripts:.2f} | {per('rpush'):.2f} | {per('blpop'):.2f} "
            f"| {(total_after - total_before - 2) / waiters:.1f} |"
        )
        holder.close()
        for backend in backends:
            backend.close()
    out += [
        "",
        "Each release runs one script, which pushes one message: to the one waiter it "
        "admits. The inbox reads include each client's idle BLPOP rounds (every 0.5 s), "
        "so they grow with the time the drain takes, not with W per release.",
        "",
    ]
    return out


def _per_grant(before: dict[str, Any], after: dict[str, Any], counter: str, grants: int) -> str:
    """How much ``counter`` of ``INFO stats`` grew per grant, as the table shows it."""
    return f"{(after[counter] - before[counter]) / grants:.1f}"


def throughput(
    run: Run, client: Callable[[], Any], url: str, progress: Callable[[str], None]
) -> list[str]:
    sizes = run.sizes
    n = sizes.throughput_processes * sizes.throughput_clients
    rows = []
    for label, make in (
        ("raw SET NX PX + DEL loop", lambda i: RawFloor(client(), f"tp{i}")),
        (
            "ceiling: enqueue script, admission read, release script; never waits",
            lambda i: Ceiling(client(), f"tp{i}"),
        ),
        (
            "semaphore-recipes Semaphore",
            lambda i: Ours(url, "throughput", sizes.capacity),
        ),
    ):
        progress(f"redis throughput: {label}")
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
        stats = client().info("stats")
        start, cpu = time.monotonic(), time.process_time()
        for t in threads:
            t.start()
        time.sleep(sizes.throughput_seconds)
        stop.set()
        for t in threads:
            t.join(60)
        elapsed, cpu = time.monotonic() - start, time.process_time() - cpu
        grants = max(sum(counts), 1)
        after = client().info("stats")

        for impl in impls:
            impl.close()
        rows.append(
            (
                label,
                sum(counts) / elapsed,
                f"{cpu / grants * 1e6:.0f}",
                _per_grant(stats, after, "total_commands_processed", grants),
                _per_grant(stats, after, "total_net_input_bytes", grants)
                + " / "
                + _per_grant(stats, after, "total_net_output_bytes", grants),
            )
        )
    floor = rows[0][1]
    return [
        f"### Throughput ({n} client threads, capacity {sizes.capacity})",
        "",
        "| implementation | grants/s | / raw loop | client CPU us / grant "
        "| commands / grant | bytes in / out per grant |",
        "|---|---|---|---|---|---|",
        *(
            f"| {label} | {ops:.0f} | {ops / floor:.2f}x | {cpu} | {commands} | {io} |"
            for label, ops, cpu, commands, io in rows
        ),
        "",
        "*client CPU / grant*: this process's CPU time over the loops (every client "
        "thread's) divided by the grants; *commands / grant*: `total_commands_processed`, "
        "the commands inside the scripts included, with the two `INFO` reads around the "
        "loops; *bytes*: what the server received and sent (`total_net_input_bytes`, "
        "`total_net_output_bytes`). The *ceiling* row is not a semaphore: each cycle "
        "sends the three requests a contended grant needs where the server decides "
        "(the enqueue script, the read of the admission message, the release script "
        "that pushes the next one) and never waits, so no such protocol beats it here.",
        "",
    ]
