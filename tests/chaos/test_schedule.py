"""The storm's fault schedules (chaos/schedule.py) without a cluster: faults of different
schedules overlap, never two of one schedule, no fault starts once the storm is off and
its last fault has healed, and a failing injection stops the storm."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from chaos.model import FaultKind
from chaos.schedule import FaultSchedule


def schedule(
    name: str,
    inject: Callable[[FaultKind, random.Random], None],
    storming: threading.Event,
    stopping: threading.Event,
) -> FaultSchedule:
    return FaultSchedule(
        name, random.Random(name), lambda rng: FaultKind.CUT, inject, gap=(0.0, 0.01),
        storming=storming, stopping=stopping,
    )  # fmt: skip


def test_schedules_overlap_and_none_starts_after_the_storm_drained() -> None:
    storming, stopping = threading.Event(), threading.Event()
    log: list[tuple[str, str, float]] = []
    lock = threading.Lock()
    first_faults_meet = threading.Barrier(2, timeout=30)  # broken if they cannot overlap

    def injector(name: str) -> Callable[[FaultKind, random.Random], None]:
        def inject(kind: FaultKind, rng: random.Random) -> None:
            with lock:
                log.append((name, "start", time.monotonic()))
                first = sum(1 for e in log if e[0] == name) == 1
            if first:
                first_faults_meet.wait()
            time.sleep(0.02)
            with lock:
                log.append((name, "end", time.monotonic()))

        return inject

    schedules = [schedule(n, injector(n), storming, stopping) for n in ("a", "b")]
    for s in schedules:
        s.start()
    storming.set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:
            if all(sum(1 for e in log if e[:2] == (n, "end")) >= 3 for n in ("a", "b")):
                break
        time.sleep(0.05)
    storming.clear()
    assert all(s.wait_idle(30) for s in schedules)
    quiet_from = time.monotonic()
    time.sleep(0.3)
    stopping.set()
    for s in schedules:
        s.join(30)
    assert [s.error for s in schedules] == [None, None]
    assert all(t <= quiet_from for _, _, t in log), "a fault started in the quiet stretch"
    for name in ("a", "b"):
        events = [what for n, what, _ in log if n == name]
        assert len(events) >= 6
        assert events == ["start", "end"] * (len(events) // 2), "two faults at once on a slot"


def test_a_failing_injection_stops_the_storm() -> None:
    storming, stopping = threading.Event(), threading.Event()

    def broken(kind: FaultKind, rng: random.Random) -> None:
        raise OSError("proxy gone")

    failing = schedule("a", broken, storming, stopping)
    failing.start()
    storming.set()
    assert stopping.wait(30)
    failing.join(30)
    assert isinstance(failing.error, OSError)
