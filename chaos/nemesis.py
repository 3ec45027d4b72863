"""The serial nemesis: faults on a seeded schedule, one at a time, each healed before
the next, now and then a quiet stretch (how each fault is done: `chaos/injector.py`)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path

from .cluster import TestCluster
from .fleet import ClientSlot
from .injector import (
    CLIENT_WEIGHTS,
    SERVER_WEIGHTS,
    STORE_CLIENT_WEIGHTS,
    Injector,
    client_weights,
    pick,
)
from .model import Fault, FaultKind

# Now and then a quiet stretch: liveness is only checked while no fault is active.
QUIET_CHANCE = 0.15
QUIET = (10.0, 16.0)
# (this order keeps a seed's schedule what it was before the storm mode existed)
WEIGHTS = {
    kind: {**CLIENT_WEIGHTS, **STORE_CLIENT_WEIGHTS, **SERVER_WEIGHTS}[kind]
    for kind in (FaultKind.KILL_CLIENT, FaultKind.PAUSE_CLIENT, FaultKind.KILL_LEADER,
                 FaultKind.KILL_MEMBER, FaultKind.RESTART_CLUSTER, FaultKind.CUT,
                 FaultKind.BLACKHOLE, FaultKind.DROP_REPLIES, FaultKind.DELAY,
                 FaultKind.EXPIRE_SESSION)
}  # fmt: skip


class Nemesis:
    def __init__(
        self,
        cluster: TestCluster,
        slots: list[ClientSlot],
        respawn: Callable[[ClientSlot], None],
        *,
        seed: str,
        session_timeout: float,
        interval: tuple[float, float],
        log_path: Path,
    ) -> None:
        self.slots = slots
        self.rng = random.Random(f"nemesis/{seed}")
        self.interval = interval
        self.stopping = threading.Event()
        self.injector = Injector(
            cluster, respawn, session_timeout=session_timeout, log_path=log_path,
            stopping=self.stopping,
        )  # fmt: skip
        self.error: BaseException | None = None
        # (filtered, in WEIGHTS' order: a seed's schedule on ZooKeeper and etcd is kept)
        self.client_kinds = set(client_weights(cluster))
        self.weights = {
            k: w for k, w in WEIGHTS.items() if k in self.client_kinds or k in cluster.server_faults
        }
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    @property
    def faults(self) -> list[Fault]:
        return self.injector.faults

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 120.0) -> None:
        """Stop injecting; the fault in progress is healed before this returns."""
        self.stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self.stopping.wait(self.rng.uniform(*self.interval)):
                kind = pick(self.rng, self.weights)
                if kind in self.client_kinds:
                    self.injector.client_fault(kind, self.rng.choice(self.slots), self.rng)
                else:
                    self.injector.server_fault(kind, self.rng)
                if self.rng.random() < QUIET_CHANCE:
                    self.stopping.wait(self.rng.uniform(*QUIET))
        except BaseException as exc:  # reported by the runner
            self.error = exc
