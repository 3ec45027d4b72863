"""A benchmark client process, driven by the orchestrator over stdin/stdout.

    python -m benchmarks.worker '{"mode": ..., "impl": ..., "target": {...}, ...}'

Modes (one line per command in, one line per answer out):

* ``latency``: ``run K`` -> ``SAMPLES [ns, ...]`` (K uncontended acquire+release cycles).
* ``handoff``, role ``holder``: ``hold I`` -> ``HELD``; ``release I`` -> ``T0 ns`` (the
  clock just before the release call). Role ``waiter``: ``wait I`` -> ``WAITING`` then,
  once granted, ``GOT ns``; ``release I`` -> ``RELEASED``.
* ``herd``: THREADS waiters share one session; the n-th one granted appends a line to
  ORDER_FILE, holds until RELEASE_FILE has n lines, then releases (``STARTED`` once all
  threads run; ends when stdin closes).
* ``throughput``: CLIENTS clients with a session each, ``READY`` once connected;
  ``go START END`` -> loops acquire->(hold HOLD_MS)->release from START to END
  (monotonic ns), then ``COUNTS [grants per client]`` and ``CPU seconds`` (the process's
  user+system CPU time over the loops: every thread's, the clients' own included).

* ``aio-latency``, ``aio-handoff``, ``aio-waiters``: the asyncio modes
  (``benchmarks.aio_worker``).

Every worker ends by itself after ``max_seconds`` (a watchdog), and when stdin closes.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import aio_worker
from .impls import (
    IMPLS,
    Client,
    KazooSemaphore,
    Target,
    WatchFloor,
    kazoo_client,
    make_client,
    now_ns,
)


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def commands() -> Any:
    for line in sys.stdin:
        words = line.split()
        if words:
            yield words


def latency(impl: str, target: Target) -> None:
    client = make_client(impl, target)
    say("READY")
    try:
        for words in commands():
            if words[0] != "run":
                break
            samples = []
            for _ in range(int(words[1])):
                t0 = time.perf_counter_ns()
                client.acquire()
                client.release()
                samples.append(time.perf_counter_ns() - t0)
            say("SAMPLES", json.dumps(samples))
    finally:
        client.close()


class ClientSide:
    """A semaphore or lock in a handoff: the waiter is granted when acquire returns."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def hold(self, i: int) -> None:
        self.client.acquire()

    def let_go(self, i: int) -> None:
        self.client.release()

    def wait(self, i: int) -> int:
        say("WAITING")
        self.client.acquire()
        return now_ns()

    def after_wait(self, i: int) -> None:
        self.client.release()

    def close(self) -> None:
        self.client.close()


class FloorSide:
    """The floor in a handoff: the waiter is 'granted' when its watch callback fires."""

    def __init__(self, floor: WatchFloor) -> None:
        self.floor = floor

    def hold(self, i: int) -> None:
        self.floor.hold(i)

    def let_go(self, i: int) -> None:
        self.floor.delete(i)

    def wait(self, i: int) -> int:
        self.floor.arm(i)
        say("WAITING")
        return self.floor.fired_at()

    def after_wait(self, i: int) -> None:
        pass

    def close(self) -> None:
        self.floor.close()


def handoff(impl: str, target: Target, role: str) -> None:
    side: ClientSide | FloorSide
    if impl.startswith("floor-"):
        side = FloorSide(WatchFloor(target, IMPLS[impl][0]))
    else:
        side = ClientSide(make_client(impl, target))
    say("READY")
    try:
        for words in commands():
            cmd, i = (role, words[0]), int(words[1])
            if cmd == ("holder", "hold"):
                side.hold(i)
                say("HELD")
            elif cmd == ("holder", "release"):
                t0 = now_ns()
                side.let_go(i)
                say("T0", t0)
            elif cmd == ("waiter", "wait"):
                say("GOT", side.wait(i))
            elif cmd == ("waiter", "release"):
                side.after_wait(i)
                say("RELEASED")
            else:
                raise ValueError(f"bad command {words!r} for a {role}")
    finally:
        side.close()


def herd(impl: str, target: Target, threads: int, order_file: str, release_file: str) -> None:
    if impl == "kazoo-sem":
        shared = kazoo_client(target)

        def make() -> Any:
            return KazooSemaphore(target, client=shared)

        def close() -> None:
            shared.stop()
            shared.close()
    else:
        import semaphore_recipes as sr

        backend = sr.connect(target.zk_url if impl == "ours-zk" else target.etcd_url)
        semaphore = backend.semaphore(target.name, capacity=target.capacity)

        class Ours:
            permit: Any = None

            def acquire(self) -> None:
                self.permit = semaphore.acquire(timeout=600)

            def release(self) -> None:
                self.permit.release()

        def make() -> Any:
            return Ours()

        def close() -> None:
            backend.close()

    def waiter() -> None:
        client = make()
        client.acquire()
        with open(order_file, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write("granted\n")
            f.flush()
            f.seek(0)
            n = len(f.read().split())
        while len(Path(release_file).read_text().split()) < n:
            time.sleep(0.002)
        client.release()

    for _ in range(threads):
        threading.Thread(target=waiter, daemon=True).start()
    say("STARTED")
    sys.stdin.read()
    close()


def throughput(impl: str, target: Target, clients: int, hold_ms: float) -> None:
    with ThreadPoolExecutor(max_workers=clients) as pool:
        made = list(pool.map(lambda _: make_client(impl, target), range(clients)))
    say("READY")
    words = next(commands())
    start, end = int(words[1]), int(words[2])
    counts = [0] * clients

    def loop(k: int) -> None:
        client = made[k]
        while now_ns() < start:
            time.sleep(0.001)
        while now_ns() < end:
            client.acquire()
            if now_ns() < end:
                counts[k] += 1
            if hold_ms:
                time.sleep(hold_ms / 1000)
            client.release()

    before = os.times()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(loop, range(clients)))
    after = os.times()
    say("COUNTS", json.dumps(counts))
    say("CPU", f"{(after.user - before.user) + (after.system - before.system):.6f}")
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(lambda c: c.close(), made))


def main() -> None:
    spec = json.loads(sys.argv[1])
    timer = threading.Timer(float(spec.get("max_seconds", 600)), lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    target = Target.from_json(spec["target"])
    mode, impl = spec["mode"], spec["impl"]
    try:
        if mode.startswith("aio-"):
            aio_worker.main(spec)
        elif mode == "latency":
            latency(impl, target)
        elif mode == "handoff":
            handoff(impl, target, spec["role"])
        elif mode == "herd":
            herd(impl, target, spec["threads"], spec["order_file"], spec["release_file"])
        elif mode == "throughput":
            throughput(impl, target, spec["clients"], float(spec.get("hold_ms", 0)))
        else:
            raise ValueError(f"unknown mode {mode!r}")
    except BaseException as exc:
        traceback.print_exc()
        say("ERROR", f"{type(exc).__name__}: {exc}".replace("\n", " "))
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)  # do not wait for client library threads


if __name__ == "__main__":
    main()
