"""A chaos client process: one backend shared by T threads, each looping acquire (weight
1-3, a random timeout) -> a fenced write through ``permit.transaction()`` -> release.

Every call is logged before and after (JSON lines, one ``os.write`` each, so a kill -9
loses at most the line being written): the checker reads them for call bounds, grants
and stalls. SIGUSR1: stop starting calls, log ``idle`` once every thread is done.
SIGTERM: the same, then close the backend and exit.

Run by the runner: ``python -m chaos.client URL OWNER LOG --threads 3 --seed 1 ...``.

Through Sentinel (``--address-map real=proxy,...``): the sentinels name the data nodes'
real addresses, and this process's data connections must go through its fault proxies,
so redis-py's public ``Sentinel.discover_master`` (sync and asyncio) is wrapped here to
answer each real address's proxy; the sentinels themselves are reached directly. Test
code only: the library is unchanged.

A backend ended by StoreHistoryReset (a promoted replica lacked writes this client saw)
is replaced by a new one, as docs/operations.md tells an application to do.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import threading
import time
import traceback
from typing import Any

import redis.asyncio.sentinel
import redis.sentinel

import semaphore_recipes as sr

from .layout import DATA_NODE, SEMAPHORE
from .model import OpKind, Outcome

CALL_MARGIN = 3.0  # seconds a call may take beyond its own bound (a loaded machine)


class OpLog:
    def __init__(self, path: str, owner: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.owner = owner
        self._ids = iter(range(1 << 62))
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def start(self, thread: int, kind: OpKind, bound: float) -> int:
        with self._lock:
            op_id = next(self._ids)
        self.write({"ev": "start", "id": op_id, "t": thread, "op": kind.value,
                    "ts": time.time(), "bound": bound})  # fmt: skip
        return op_id

    def end(self, op_id: int, outcome: Outcome, **extra: Any) -> None:
        self.write({"ev": "end", "id": op_id, "ts": time.time(), "outcome": outcome.value, **extra})


def _over_admit_by_one() -> None:
    """The campaign's own end-to-end self-test: admission with an off-by-one capacity,
    which the checker must flag as over_capacity from the store's history."""
    from semaphore_recipes._core import queue

    decide = queue.decide

    def off_by_one(lower: Any, weight: int, capacity: int) -> Any:
        return decide(lower, weight, capacity + 1)

    queue.decide = off_by_one
    # On Redis the server admits, and the client's own decision grants nothing the
    # server did not: the client's copy of the scripts gets the off-by-one as well.
    from semaphore_recipes.redis import scripts

    rule = "total + e.w <= cap"
    assert all(rule in source for source in scripts.SCRIPTS.values()), "sweep rule moved"
    for name, source in scripts.SCRIPTS.items():
        scripts.SCRIPTS[name] = source.replace(rule, "total + e.w <= cap + 1")


MUTATIONS = {"over_admit": _over_admit_by_one}


def parse_address_map(text: str) -> dict[tuple[str, int], tuple[str, int]]:
    """``host:port=host:port,...`` as {real: proxy} (ValueError if malformed)."""
    found = {}
    for pair in filter(None, text.split(",")):
        real, proxy = pair.split("=")
        (rhost, rport), (phost, pport) = real.rsplit(":", 1), proxy.rsplit(":", 1)
        found[(rhost, int(rport))] = (phost, int(pport))
    return found


def route_through_proxies(address_map: dict[tuple[str, int], tuple[str, int]]) -> None:
    """Make the primary the sentinels name the proxy in front of it (both faces)."""
    sync_discover: Any = redis.sentinel.Sentinel.discover_master  # (untyped in redis-py)
    async_discover: Any = redis.asyncio.sentinel.Sentinel.discover_master

    def mapped(address: Any) -> Any:
        host, port = address
        return address_map.get((str(host), int(port)), address)

    def discover(self: Any, service_name: str) -> Any:
        return mapped(sync_discover(self, service_name))

    async def discover_async(self: Any, service_name: str) -> Any:
        return mapped(await async_discover(self, service_name))

    redis.sentinel.Sentinel.discover_master = discover  # type: ignore[method-assign]
    redis.asyncio.sentinel.Sentinel.discover_master = discover_async  # type: ignore[method-assign]


def classify(exc: BaseException) -> Outcome:
    if isinstance(exc, sr.AcquireTimeout):
        return Outcome.TIMEOUT
    if isinstance(exc, sr.PermitLost):
        return Outcome.LOST
    if isinstance(exc, sr.BackendUnavailable):
        return Outcome.UNAVAILABLE
    return Outcome.ERROR


class Worker:
    def __init__(self, args: argparse.Namespace, backend: Any, log: OpLog) -> None:
        self.args = args
        self.backend = backend
        self.log = log
        self.sem = backend.semaphore(SEMAPHORE, capacity=args.capacity, adopt_capacity=True)
        self.stopping = threading.Event()
        self.ended = threading.Event()  # StoreHistoryReset: main() opens a new backend
        self.request_bound = args.request_bound

    def reopen(self, backend: Any) -> None:
        """Go on with a new backend (the old one ended with StoreHistoryReset)."""
        self.backend = backend
        self.sem = backend.semaphore(SEMAPHORE, capacity=self.args.capacity, adopt_capacity=True)
        self.ended.clear()

    def run(self, index: int) -> None:
        rng = random.Random(f"{self.args.seed}/{self.log.owner}/{index}")
        writes = 0
        while not self.stopping.is_set():
            if self.ended.is_set():
                time.sleep(0.1)  # a new backend is being opened
                continue
            weight = rng.randint(1, 3)
            timeout = rng.uniform(1.0, 4.0)
            bound = timeout + self.request_bound + CALL_MARGIN
            op = self.log.start(index, OpKind.ACQUIRE, bound)
            try:
                permit = self.sem.acquire(weight, timeout=timeout)
            except Exception as exc:
                outcome = classify(exc)
                if outcome is Outcome.ERROR:
                    traceback.print_exc()  # into the client's log file, for the post-mortem
                self.log.end(op, outcome, detail=repr(exc)[:300], w=weight)
                if isinstance(exc, sr.StoreHistoryReset):
                    self.ended.set()
                continue
            self.log.end(op, Outcome.OK, key=permit.key, token=permit.token, w=weight)
            try:
                time.sleep(rng.uniform(0.0, 0.15))
                writes += 1
                self.fenced_write(index, permit, writes)
            finally:
                op = self.log.start(index, OpKind.RELEASE, self.request_bound + CALL_MARGIN)
                try:
                    permit.release()
                    self.log.end(op, Outcome.OK)
                except Exception as exc:  # release never raises: a violation if it does
                    self.log.end(op, Outcome.ERROR, detail=repr(exc)[:300])

    def fenced_write(self, index: int, permit: Any, n: int) -> None:
        writer = f"{self.log.owner}/t{index}"
        value = json.dumps({"writer": writer, "key": permit.key, "token": permit.token, "n": n})
        op = self.log.start(index, OpKind.COMMIT, self.request_bound + CALL_MARGIN)
        try:
            permit.transaction().set(DATA_NODE, value.encode()).commit()
        except Exception as exc:
            if classify(exc) is Outcome.ERROR:
                traceback.print_exc()
            detail = f"{exc!r}"[:300] + f" lost={permit.lost.is_set()} state={permit.state.value}"
            self.log.end(op, classify(exc), detail=detail, key=permit.key, token=permit.token)
            return
        self.log.end(op, Outcome.OK, key=permit.key, token=permit.token)


def _connect(args: argparse.Namespace, log: OpLog, terminate: threading.Event) -> Any:
    """A backend, tried again while the cluster restarts (None: given up or told to end)."""
    connect_until = time.monotonic() + args.connect_within
    for attempt in itertools.count():  # the cluster may be restarting
        if terminate.is_set() or time.monotonic() > connect_until:
            return None
        try:
            backend = sr.connect(args.url, owner=args.owner)
        except sr.BackendUnavailable as exc:
            log.write({"ev": "connect_failed", "ts": time.time(), "attempt": attempt,
                       "detail": repr(exc)[:300]})  # fmt: skip
            time.sleep(0.5)
            continue
        log.write({"ev": "connected", "ts": time.time(), "attempt": attempt})
        return backend
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chaos.client")
    parser.add_argument("url")
    parser.add_argument("owner")
    parser.add_argument("log")
    parser.add_argument(
        "--backend",
        choices=("zookeeper", "etcd", "redis", "redis-sentinel", "postgresql", "mysql"),
        required=True,
    )
    parser.add_argument(
        "--address-map", type=parse_address_map, default={},
        help="real=proxy,...: the data nodes the sentinels name, and their proxies",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--seed", default="0")
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--request-bound", type=float, default=2.0)
    # (a refused connection fails at once: retry for a time, not a number of attempts)
    parser.add_argument("--connect-within", type=float, default=150.0)
    parser.add_argument("--mutation", choices=sorted(MUTATIONS), default=None)
    args = parser.parse_args(argv)
    if args.mutation is not None:
        MUTATIONS[args.mutation]()
    if args.address_map:
        route_through_proxies(args.address_map)
    log = OpLog(args.log, args.owner)
    terminate = threading.Event()
    idle = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminate.set())
    signal.signal(signal.SIGUSR1, lambda *_: idle.set())
    backend = _connect(args, log, terminate)
    if backend is None:
        return
    worker = Worker(args, backend, log)
    threads = [
        threading.Thread(target=worker.run, args=(i,), name=f"chaos-{i}", daemon=True)
        for i in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    log.write({"ev": "ready", "ts": time.time()})
    while not (terminate.is_set() or idle.is_set()):
        time.sleep(0.1)
        if worker.ended.is_set():  # StoreHistoryReset: the threads wait for a new backend
            with contextlib.suppress(Exception):
                worker.backend.close()
            backend = _connect(args, log, terminate)
            if backend is None:
                break
            worker.reopen(backend)
    worker.stopping.set()
    for thread in threads:
        thread.join()
    log.write({"ev": "idle", "ts": time.time()})
    while not terminate.is_set():
        time.sleep(0.1)
    worker.backend.close()
    log.write({"ev": "closed", "ts": time.time()})


if __name__ == "__main__":
    main()
