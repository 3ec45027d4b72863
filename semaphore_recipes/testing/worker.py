"""A separate process that uses a semaphore, driven by the tests.

    python -m semaphore_recipes.testing.worker URL NAME CAPACITY MODE [options]

MODE cycle: acquire random weights in a loop; an independent checker file (flock)
records the concurrent held weight. MODE multi: the same with ``acquire_all`` over
random subsets of several semaphores (NAME a,b,c; --weights their capacities).
MODE hold: acquire, print "HELD <token>", then wait for the permit to be lost (or
"release" on stdin) and report. MODE wait: acquire, append "<label>" to --order-file
when granted, hold --hold seconds, release.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import semaphore_recipes as sr
import semaphore_recipes.aio
from semaphore_recipes.testing.checker import checked, checked_holds
from semaphore_recipes.testing.faces import BlockingAsyncBackend, Face, LoopThread


def multi_cycles(url: str, capacities: dict[str, int], seconds: float, checker: str) -> None:
    """Take random subsets of the semaphores with random weights, atomically, for short
    holds, until ``seconds`` pass; each hold is recorded in ``checker``."""
    backend = sr.connect(url)
    for name, capacity in capacities.items():
        backend.semaphore(name, capacity=capacity)
    rng = random.Random()
    end = time.monotonic() + seconds
    cycles = 0
    while time.monotonic() < end:
        names = rng.sample(sorted(capacities), rng.randint(1, len(capacities)))
        weights = {n: rng.randint(1, capacities[n]) for n in names}
        with backend.acquire_all(weights, timeout=60):
            checked_holds(checker, os.getpid(), weights)
            time.sleep(rng.uniform(0, 0.01))
            checked_holds(checker, os.getpid(), None)
        cycles += 1
    print(f"CYCLES {cycles}", flush=True)
    backend.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("name")
    ap.add_argument("capacity", type=int)
    ap.add_argument("mode", choices=["cycle", "hold", "wait", "herd", "multi"])
    ap.add_argument("--weights", default="1")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--checker")
    ap.add_argument("--permits", type=int, default=1)
    ap.add_argument("--order-file")
    ap.add_argument("--label", default=str(os.getpid()))
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--timeout", type=float)
    ap.add_argument("--lost-wait", type=float, default=30.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--release-file")
    ap.add_argument("--face", choices=[f.value for f in Face], default=Face.SYNC.value)
    args = ap.parse_args()
    if args.mode == "multi":  # NAME: a,b,c; CAPACITY: ignored; --weights: their capacities
        capacities = dict(zip(args.name.split(","), map(int, args.weights.split(",")), strict=True))
        multi_cycles(args.url, capacities, args.seconds, args.checker)
        return 0
    backend: Any
    if args.face == Face.ASYNC.value:  # the asyncio face, through the tests' blocking view
        loop = LoopThread()

        async def connect() -> sr.aio.AsyncBackend:
            return await sr.aio.connect(args.url)

        backend = BlockingAsyncBackend(loop.run(connect()), loop)
    else:
        backend = sr.connect(args.url)
    sem = backend.semaphore(args.name, capacity=args.capacity)
    if args.mode == "cycle":
        print("OPENED", flush=True)  # (connected, the semaphore agreed)
        weights = [int(w) for w in args.weights.split(",")]
        end = time.monotonic() + args.seconds
        cycles = 0
        while time.monotonic() < end:
            w = random.choice(weights)
            with sem.acquire(permits=w, timeout=30):
                checked(args.checker, w)
                time.sleep(random.uniform(0, 0.004))
                checked(args.checker, -w)
            cycles += 1
        print(f"CYCLES {cycles}", flush=True)
    elif args.mode == "hold":
        permit = sem.acquire(permits=args.permits, timeout=args.timeout)
        print(f"HELD {permit.token}", flush=True)

        def release_on_input() -> None:
            sys.stdin.readline()
            permit.release()

        threading.Thread(target=release_on_input, daemon=True).start()
        if permit.lost.wait(args.lost_wait):
            print("LOST", flush=True)
            tx = permit.transaction()
            tx.create(backend.data_key(args.name, f"fenced-write-{os.getpid()}"), b"stale holder")
            try:
                tx.commit()
                print("FENCE-PASSED", flush=True)
            except sr.PermitLost:
                print("FENCE-REJECTED", flush=True)
        permit.release()
    elif args.mode == "herd":
        # --threads waiters. The n-th one granted appends a line to --order-file, holds
        # until --release-file has n lines, then releases: the test hands off one permit
        # at a time. Ends, closing the session, when stdin closes.
        def waiter() -> None:
            permit = sem.acquire(timeout=args.timeout)
            with open(args.order_file, "a+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.write("granted\n")
                f.seek(0)
                n = len(f.read().split())
            while len(Path(args.release_file).read_text().split()) < n:
                time.sleep(0.005)
            permit.release()

        for _ in range(args.threads):
            threading.Thread(target=waiter, daemon=True).start()
        print("STARTED", flush=True)
        sys.stdin.read()
        backend.close()
        os._exit(0)
    else:
        print("WAITING", flush=True)
        permit = sem.acquire(permits=args.permits, timeout=args.timeout)
        with open(args.order_file, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(f"{args.label}\n")
        print(f"GRANTED {permit.token}", flush=True)
        time.sleep(args.hold)
        permit.release()
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
