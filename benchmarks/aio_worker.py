"""The asyncio modes of a benchmark worker (``benchmarks.worker`` hands them over here).

Everything runs on one event loop; the orchestrator's commands are read from stdin
through the loop (a pipe reader, no thread), so the backends' own tasks (lease
keepalives, watch streams) keep running between commands.

* ``aio-latency``: ``run K`` -> ``SAMPLES [ns, ...]`` (K uncontended cycles).
* ``aio-handoff``, role ``holder``: ``hold I`` -> ``HELD``; ``release I`` -> ``T0 ns``.
  Role ``waiter``: ``wait I`` -> ``WAITING`` then, once granted (the awaiting task
  resumed), ``GOT ns``; ``release I`` -> ``RELEASED``.
* ``aio-waiters``: ``READY {process figures}`` once connected and the semaphore open;
  ``go`` -> WAITERS tasks each acquire once (``STARTED`` when every one of them is
  awaiting its acquire); the first CAPACITY granted hold until the queue is full (gate
  ``self``: the worker sees it in ``status()``; gate ``server``: the orchestrator sees
  the entries on the server and sends ``queued``), then ``QUEUED {figures}``; the others
  hold HOLD_MS and release; ``DONE {figures}`` once every task released. At the full
  queue (gate ``server``), ``probe K`` -> ``PROBED {"ms": [...], "unanswered": n}``: K
  acquires without waiting, one after the other (``benchmarks.scale``: an enqueue's
  cost at W).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from .aio_impls import AioOurs, AioWatchFloor, AsyncClient, make_aio_client
from .impls import IMPLS, Target, now_ns


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


async def commands() -> AsyncIterator[list[str]]:
    """The orchestrator's commands, read from stdin by the loop (ends when it closes)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        if words := line.decode().split():
            yield words


async def latency(impl: str, target: Target) -> None:
    client = await make_aio_client(impl, target)
    say("READY")
    try:
        async for words in commands():
            if words[0] != "run":
                break
            samples = []
            for _ in range(int(words[1])):
                t0 = time.perf_counter_ns()
                await client.acquire()
                await client.release()
                samples.append(time.perf_counter_ns() - t0)
            say("SAMPLES", json.dumps(samples))
    finally:
        await client.close()


class ClientSide:
    """A semaphore in a handoff: the waiter is granted when its acquire returns."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def hold(self, i: int) -> None:
        await self.client.acquire()

    async def let_go(self, i: int) -> None:
        await self.client.release()

    async def wait(self, i: int) -> int:
        say("WAITING")
        await self.client.acquire()
        return now_ns()

    async def after_wait(self, i: int) -> None:
        await self.client.release()

    async def close(self) -> None:
        await self.client.close()


class FloorSide:
    """The floor in a handoff: the waiter is 'granted' when its watch wakes its task."""

    def __init__(self, floor: AioWatchFloor) -> None:
        self.floor = floor

    async def hold(self, i: int) -> None:
        await self.floor.hold(i)

    async def let_go(self, i: int) -> None:
        await self.floor.delete(i)

    async def wait(self, i: int) -> int:
        await self.floor.arm(i)
        say("WAITING")
        return await self.floor.fired_at()

    async def after_wait(self, i: int) -> None:
        pass

    async def close(self) -> None:
        await self.floor.close()


async def handoff(impl: str, target: Target, role: str) -> None:
    side: ClientSide | FloorSide
    if impl.startswith("aio-floor-"):
        floor = AioWatchFloor(target, IMPLS[impl][0])
        await floor.open()
        side = FloorSide(floor)
    else:
        side = ClientSide(await make_aio_client(impl, target))
    say("READY")
    try:
        async for words in commands():
            cmd, i = (role, words[0]), int(words[1])
            if cmd == ("holder", "hold"):
                await side.hold(i)
                say("HELD")
            elif cmd == ("holder", "release"):
                t0 = now_ns()
                await side.let_go(i)
                say("T0", t0)
            elif cmd == ("waiter", "wait"):
                say("GOT", await side.wait(i))
            elif cmd == ("waiter", "release"):
                await side.after_wait(i)
                say("RELEASED")
            else:
                raise ValueError(f"bad command {words!r} for a {role}")
    finally:
        await side.close()


def process_figures() -> dict[str, float]:
    """This process's resident set now and at its peak (kB), and its thread counts
    (the kernel's, which counts every native thread, and Python's)."""
    out: dict[str, float] = {"python_threads": threading.active_count()}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                out[key] = int(value.split()[0])
    return out


def fifo_lag(tokens: list[int]) -> int:
    """The most entries created earlier (lower token) still not granted when a later
    one was: FIFO admission with capacity C keeps it at most C - 1 (those are admitted
    at the same time, their tasks not resumed yet)."""
    rank = {token: r for r, token in enumerate(sorted(tokens))}
    tree = [0] * (len(tokens) + 1)  # Fenwick tree: granted entries by rank

    def granted_below(r: int) -> int:
        total = 0
        while r > 0:
            total += tree[r]
            r -= r & -r
        return total

    worst = 0
    for token in tokens:
        r = rank[token]
        worst = max(worst, r - granted_below(r))
        i = r + 1
        while i < len(tree):
            tree[i] += 1
            i += i & -i
    return worst


async def probe(semaphore: Any, count: int) -> dict[str, Any]:
    """``count`` acquires without waiting, one after the other, at the full queue: each
    enqueues behind every waiter, finds it cannot be admitted, and leaves. -> the
    milliseconds each took, and how many had no answer within the one reply such an
    acquire waits for (BackendUnavailable: a store too slow to answer behind W)."""
    errors = importlib.import_module("semaphore_recipes.errors")
    took, unanswered = [], 0
    for _ in range(count):
        t0 = time.perf_counter()
        try:
            permit = await semaphore.acquire(blocking=False)
        except errors.WouldBlock:
            pass
        except errors.BackendUnavailable:
            unanswered += 1
        else:
            await permit.release()
            raise RuntimeError("a probe was granted: the queue was not full")
        took.append((time.perf_counter() - t0) * 1000)
    return {"ms": took, "unanswered": unanswered}


async def waiters(
    backend_name: str,
    target: Target,
    count: int,
    hold_ms: float,
    gate_by: str,
    report_grants: bool = False,
) -> None:
    client = await AioOurs.open(target, backend_name)
    semaphore, capacity = client.semaphore, target.capacity
    lines = commands()
    gc.collect()
    ready = process_figures()
    say("READY", json.dumps(ready))
    if (await anext(lines))[0] != "go":
        raise ValueError("expected 'go'")
    gate = asyncio.Event()
    tokens: list[int] = []  # in the order the tasks were granted
    granted_ns: list[int] = []  # when (the system's monotonic clock, shared by processes)
    peak_threads, peak_rss = ready["Threads"], ready["VmRSS"]

    async def sample() -> None:
        nonlocal peak_threads, peak_rss
        while True:
            now = process_figures()
            peak_threads = max(peak_threads, now["Threads"])
            peak_rss = max(peak_rss, now["VmRSS"])
            await asyncio.sleep(0.02)

    async def one() -> None:
        permit = await semaphore.acquire(timeout=1800)
        tokens.append(permit.token)
        granted_ns.append(time.monotonic_ns())
        if len(tokens) <= capacity:
            await gate.wait()
        else:
            await asyncio.sleep(hold_ms / 1000)
        await permit.release()

    started = time.monotonic()
    sampler = asyncio.ensure_future(sample())
    tasks = [asyncio.ensure_future(one()) for _ in range(count)]
    await asyncio.sleep(0)  # every task ran to its first await: all acquires under way
    say("STARTED")
    if gate_by == "self":
        while len((await semaphore.status()).waiters) < count - capacity:
            await asyncio.sleep(0.01)
    else:
        while (words := await anext(lines))[0] == "probe":
            say("PROBED", json.dumps(await probe(semaphore, int(words[1]))))
        if words[0] != "queued":
            raise ValueError("expected 'probe K' or 'queued'")
    queued = process_figures()
    queued["enqueue_s"] = time.monotonic() - started
    say("QUEUED", json.dumps(queued))
    opened = time.monotonic()
    gate.set()
    await asyncio.gather(*tasks)
    drain = time.monotonic() - opened
    sampler.cancel()
    done: dict[str, Any] = dict(process_figures())
    done.update(
        drain_s=drain,
        peak_threads=max(peak_threads, done["Threads"]),
        peak_rss=max(peak_rss, done["VmRSS"], done["VmHWM"]),
        grants=len(tokens),
        distinct=len(set(tokens)),
        fifo_lag=fifo_lag(tokens),
    )
    if report_grants:  # several processes share the queue: the orchestrator merges them
        done["grants_at"] = list(zip(granted_ns, tokens, strict=True))
    await client.close()
    say("DONE", json.dumps(done))


def main(spec: dict[str, Any]) -> None:
    """Run the asyncio mode ``spec["mode"]`` to its end."""
    target = Target.from_json(spec["target"])
    mode, impl = spec["mode"], spec["impl"]
    if mode == "aio-latency":
        asyncio.run(latency(impl, target))
    elif mode == "aio-handoff":
        asyncio.run(handoff(impl, target, spec["role"]))
    elif mode == "aio-waiters":
        asyncio.run(
            waiters(
                IMPLS[impl][0],
                target,
                spec["waiters"],
                float(spec["hold_ms"]),
                spec["gate"],
                spec.get("report_grants", False),
            )
        )
    else:
        raise ValueError(f"unknown mode {mode!r}")
