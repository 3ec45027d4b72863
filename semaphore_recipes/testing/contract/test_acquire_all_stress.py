"""Several semaphores at once, under load (issue 16): 20 processes take random subsets
of 3 semaphores with random weights for short holds, while some of them are killed
(their sessions end with them) and replaced. It finishes (no deadlock), the holds the
processes record under a file lock never exceed any capacity, and neither do the holders
the store's own records show, read by the test throughout (an independent check: what
the store admitted, not what the clients say they hold).

``SR_MULTI_STRESS_SECONDS`` sets how long the processes cycle (10 by default; longer
for a soak)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

from semaphore_recipes import Semaphore, SemaphoreError
from semaphore_recipes.testing.checker import checked_holds
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.workers import Workers

SECONDS = float(os.environ.get("SR_MULTI_STRESS_SECONDS", "10"))
PROCESSES = 20
CAPACITIES = {"st-a": 1, "st-b": 2, "st-c": 3}
SESSION = 2  # seconds: a killed process's entries go within about that


@pytest.mark.parametrize("service", ["zookeeper", "etcd", "redis"], indirect=True)
def test_twenty_processes_with_kills_finish_within_every_capacity(
    service: Harness, workers: Workers, tmp_path: Path
) -> None:
    checker = tmp_path / "checker.json"
    checker.write_text("")
    url = service.url_with(session_timeout=SESSION)
    names = ",".join(CAPACITIES)
    capacities = ",".join(str(c) for c in CAPACITIES.values())

    def start(seconds: float) -> subprocess.Popen[str]:
        args = [names, "0", "multi", "--weights", capacities, "--seconds", f"{seconds:g}"]
        return workers.start(url, *args, "--checker", str(checker))

    rng = random.Random(16)
    reader = service.connect()
    # (created before the workers open them)
    sems = {name: reader.semaphore(name, capacity=c) for name, c in CAPACITIES.items()}
    stop = threading.Event()
    seen: dict[str, list[int]] = {name: [] for name in CAPACITIES}
    sampler = threading.Thread(target=_sample, args=(service, sems, stop, seen), daemon=True)
    sampler.start()
    running = [start(SECONDS) for _ in range(PROCESSES)]
    end = time.monotonic() + SECONDS
    kills = 0
    while time.monotonic() < end - 3:
        time.sleep(rng.uniform(0.5, 1.5))
        victim = rng.choice([p for p in running if p.poll() is None])
        victim.kill()  # waiting or holding: its session ends with it
        victim.wait()
        checked_holds(str(checker), victim.pid, None)  # it no longer uses anything
        kills += 1
        running.remove(victim)
        running.append(start(max(1.0, end - time.monotonic())))
    outputs = []
    for proc in running:
        out, err = proc.communicate(timeout=SECONDS + 90)  # a deadlock ends here
        assert proc.returncode == 0, err[-2000:]
        outputs.append(out)
    stop.set()
    sampler.join(30)
    reader.close()
    state = json.loads(checker.read_text())
    # the store's records: enough snapshots of each queue, none above its capacity
    assert all(len(seen[n]) >= 10 for n in CAPACITIES), {n: len(v) for n, v in seen.items()}
    most = {n: max(v) for n, v in seen.items()}
    assert all(most[n] <= c for n, c in CAPACITIES.items()), most
    assert any(most.values())  # it did see holders
    assert kills >= 3
    assert state["grants"] > PROCESSES * 5, state["grants"]
    assert all(state["max"][n] <= c for n, c in CAPACITIES.items()), state["max"]
    assert all(out.startswith("CYCLES") for out in outputs), outputs
    # the killed processes' entries go with their sessions; nothing else is left
    wait_until(lambda: service.entries() == [], timeout=SESSION * 5)


def _sample(
    service: Harness, sems: dict[str, Semaphore], stop: threading.Event, seen: dict[str, list[int]]
) -> None:
    """Until ``stop``: the permits the store records as held (marked held, or inside
    the admitted prefix) in each queue, by ``status()``. A snapshot counts only when
    no entry came or went while it was read (the harness lists the store's entries
    before and after): a status read in several requests (ZooKeeper) could otherwise
    pair an entry about to leave with its successor's later held mark."""
    while not stop.is_set():
        for name, sem in sems.items():
            before = service.entries(name)
            try:
                holders = sem.status().holders
            except SemaphoreError:
                continue  # (a slow read under load: the next one counts)
            if service.entries(name) == before:
                seen[name].append(sum(h.permits for h in holders))
        stop.wait(0.1)
