"""Shared test helpers. Server fixtures come from the semaphore_recipes pytest plugin."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from semaphore_recipes.testing.faces import Face
from semaphore_recipes.testing.harness import Harness, Verb, VerbNotSupported

from .secured import _secured_etcd, secured  # noqa: F401  (fixtures of the permission tests)

WORKER = str(Path(__file__).with_name("worker.py"))


def _faced(kinds: list[str]) -> list[tuple[str, Face]]:
    return [(kind, face) for face in Face for kind in kinds]


def _face_id(param: tuple[str, Face]) -> str:
    kind, face = param
    return kind if face is Face.SYNC else f"{kind}-aio"


@pytest.fixture(params=_faced(["zookeeper", "etcd", "memory", "redis"]), ids=_face_id)
def service(request: pytest.FixtureRequest) -> Harness:
    """One backend under test, seen the same way whatever the store and the face: a
    harness of the plugin (``<kind>_harness``), with its fault verbs, opening backends
    of the sync face, or of the asyncio face through a blocking view (``-aio`` ids:
    interrupts of the calling thread become cancellations of the awaiting task)."""
    # (a test may parametrize it indirectly with the store's name alone: the sync face)
    kind, face = (request.param, Face.SYNC) if isinstance(request.param, str) else request.param
    harness: Harness = request.getfixturevalue(f"{kind}_harness")
    return harness.with_face(face)


@pytest.fixture(params=_faced(["zookeeper", "etcd"]), ids=_face_id)
def cluster(request: pytest.FixtureRequest) -> Harness:
    """A 3-member ensemble/cluster under test (``kill_leader``), through either face."""
    # (a test may parametrize it indirectly with the store's name alone: the sync face)
    kind, face = (request.param, Face.SYNC) if isinstance(request.param, str) else request.param
    harness: Harness = request.getfixturevalue(f"{kind}_cluster_harness")
    return harness.with_face(face)


def needs(harness: Harness, *verbs: Verb) -> None:
    """Skip the test, saying why, where the harness lacks one of ``verbs``."""
    try:
        harness.require(*verbs)
    except VerbNotSupported as exc:
        pytest.skip(exc.reason)


class Workers:
    """Worker processes (tests/worker.py), killed at teardown if still running."""

    def __init__(self, face: Face = Face.SYNC) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.face = face  # the test's: its workers drive the same face

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, WORKER, *args, "--face", self.face.value],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    @staticmethod
    def expect(proc: subprocess.Popen[str], prefix: str, timeout: float = 20.0) -> str:
        """Read the worker's stdout until a line starting with ``prefix``."""
        assert proc.stdout is not None
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith(prefix):
                    return line.strip()
        err = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
        raise AssertionError(f"worker never printed {prefix!r} (exit {proc.poll()}): {err[-2000:]}")


@pytest.fixture
def workers(request: pytest.FixtureRequest) -> Iterator[Workers]:
    face = Face.SYNC
    for name in ("service", "cluster"):
        if name in request.fixturenames:
            harness: Harness = request.getfixturevalue(name)
            if harness.kind == "memory":
                pytest.skip("worker processes cannot share an in-process memory store")
            face = harness.face
    w = Workers(face)
    yield w
    for proc in w.procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def interrupt_acquires(
    acquire: Callable[[], Any], seed: int, wanted: int = 8, most: int = 200
) -> tuple[int, list[Any]]:
    """Call ``acquire`` (and release what it returns) with a KeyboardInterrupt of the main
    thread (through the blocking view of the asyncio face: the task's cancellation) timed
    at random within one acquire+release's duration, measured first on this store and
    this machine now (a fixed window let a fast store finish before most timers fired),
    until ``wanted`` interrupts landed inside ``acquire`` or ``most`` calls were made.
    Returns how many landed inside, and the permits it returned."""
    import _thread
    import random

    cycles = []
    for _ in range(5):
        started = time.monotonic()
        acquire().release()
        cycles.append(time.monotonic() - started)
    window = max(0.0005, sorted(cycles)[2])
    rng = random.Random(seed)
    interrupted = attempts = 0
    granted = []
    while interrupted < wanted and attempts < most:
        attempts += 1
        fired = threading.Event()

        def fire(fired: threading.Event = fired) -> None:
            _thread.interrupt_main()
            fired.set()

        timer = threading.Timer(rng.uniform(0, window), fire)
        permit = None
        in_acquire = False
        try:
            timer.start()  # (the interrupt may even land in here)
            in_acquire = True
            permit = acquire()
        except KeyboardInterrupt:
            interrupted += in_acquire
        while True:  # an interrupt that missed acquire lands here, not in release()
            try:
                fired.wait()
                time.sleep(0.005)
                break
            except KeyboardInterrupt:
                continue
        if permit is not None:
            granted.append(permit)
            permit.release()
    return interrupted, granted


def waiter_thread(sem: Any, timeout: float = 30) -> tuple[threading.Thread, list[Any]]:
    """``sem.acquire(timeout)`` in a daemon thread; its list gets (granted at, permit)."""
    out: list[Any] = []

    def run() -> None:
        permit = sem.acquire(timeout=timeout)
        out.append((time.monotonic(), permit))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def read_checker(path: Path) -> dict[str, int]:
    """The workers' concurrent-weight record, read under their lock (never half-written)."""
    import fcntl
    import json

    with path.open() as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        text = f.read()
    return json.loads(text) if text else {"now": 0, "max": 0, "grants": 0}


def cycle_through_a_leader_kill(
    url: str, workers: Workers, tmp_path: Path, kill_leader: Callable[[], None]
) -> None:
    """Four processes cycle weighted acquires (capacity 2) for 8 s; the leader is killed
    mid-way. Never above capacity, and work goes on under the new leader."""
    checker = tmp_path / "checker.json"
    checker.write_text("")
    args = ["ens", "2", "cycle", "--weights", "1,2", "--seconds", "8", "--checker", str(checker)]
    procs = [workers.start(url, *args) for _ in range(4)]
    wait_until(lambda: read_checker(checker)["grants"] > 20)
    kill_leader()
    grants_at_kill = read_checker(checker)["grants"]
    for p in procs:
        Workers.expect(p, "CYCLES", timeout=60)
        assert p.wait(20) == 0
    state = read_checker(checker)
    assert state["max"] <= 2
    assert state["grants"] > grants_at_kill + 20  # work resumed under the new leader
