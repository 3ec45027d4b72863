"""The nemesis: faults on a seeded schedule, one at a time, each healed before the next.

Client faults act on one client slot: kill -9 (a new incarnation starts at once),
SIGSTOP past the session then SIGCONT, or its proxies cut / black-holed / dropping
replies / holding bytes (a delay) for a while. Server faults: kill -9 of the leader or
of a member (restarted a little later), or of every member at once (a restart of the
whole cluster). Every fault is logged with its start and the moment it was healed.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from semaphore_recipes.testing.proxy import FaultProxy

from .cluster import TestCluster
from .fleet import ClientSlot
from .model import Fault, FaultKind

# how each network fault starts on a proxy (restore() ends it)
NETWORK_FAULTS: dict[FaultKind, Callable[[FaultProxy], None]] = {
    FaultKind.CUT: FaultProxy.cut,
    FaultKind.BLACKHOLE: FaultProxy.blackhole,
    FaultKind.DROP_REPLIES: FaultProxy.drop_replies,
    FaultKind.DELAY: FaultProxy.hold,
}
# Now and then a quiet stretch: liveness is only checked while no fault is active.
QUIET_CHANCE = 0.15
QUIET = (10.0, 16.0)
WEIGHTS = {
    FaultKind.KILL_CLIENT: 3,
    FaultKind.PAUSE_CLIENT: 2,
    FaultKind.KILL_LEADER: 1,
    FaultKind.KILL_MEMBER: 1,
    FaultKind.RESTART_CLUSTER: 0.5,
    FaultKind.CUT: 1.5,
    FaultKind.BLACKHOLE: 1.5,
    FaultKind.DROP_REPLIES: 1.5,
    FaultKind.DELAY: 1.5,
}


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
        self.cluster = cluster
        self.slots = slots
        self.respawn = respawn
        self.rng = random.Random(f"nemesis/{seed}")
        self.session = session_timeout
        self.interval = interval
        self.log_path = log_path
        self.faults: list[Fault] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 120.0) -> None:
        """Stop injecting; the fault in progress is healed before this returns."""
        self.stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        kinds = list(WEIGHTS)
        weights = [WEIGHTS[k] for k in kinds]
        try:
            while not self.stopping.wait(self.rng.uniform(*self.interval)):
                kind = self.rng.choices(kinds, weights)[0]
                self._inject(kind)
                if self.rng.random() < QUIET_CHANCE:
                    self.stopping.wait(self.rng.uniform(*QUIET))
        except BaseException as exc:  # reported by the runner
            self.error = exc

    def _record(self, kind: FaultKind, target: str, start: float) -> None:
        fault = Fault(kind, target, start, time.time())
        self.faults.append(fault)
        with self.log_path.open("a") as log:
            log.write(json.dumps({"kind": kind.value, "target": target,
                                  "start": fault.start, "end": fault.end}) + "\n")  # fmt: skip

    def _pause(self, seconds: float) -> None:
        self.stopping.wait(seconds)  # a stop request shortens the fault, never skips healing

    def _inject(self, kind: FaultKind) -> None:
        rng = self.rng
        start = time.time()
        if kind is FaultKind.KILL_CLIENT:
            slot = rng.choice(self.slots)
            target = slot.owner
            slot.kill9()
            self._record(kind, target, start)
            self.respawn(slot)
        elif kind is FaultKind.PAUSE_CLIENT:
            slot = rng.choice(self.slots)
            slot.signal(signal.SIGSTOP)
            time.sleep(self.session + rng.uniform(0.5, 1.5))  # past the session, always
            slot.signal(signal.SIGCONT)
            self._record(kind, slot.owner, start)
        elif kind in NETWORK_FAULTS:
            slot = rng.choice(self.slots)
            for proxy in slot.proxies:
                NETWORK_FAULTS[kind](proxy)
            self._pause(rng.uniform(0.3, 2.5 * self.session))
            if kind in (FaultKind.BLACKHOLE, FaultKind.DROP_REPLIES):
                # Bytes were thrown away mid-stream: TCP never does that to a live
                # connection, so the connections die (reset) before traffic resumes.
                for proxy in slot.proxies:
                    proxy.cut()
            slot.restore_network()
            self._record(kind, slot.owner, start)
        elif kind in (FaultKind.KILL_LEADER, FaultKind.KILL_MEMBER):
            member = (
                self.cluster.leader() if kind is FaultKind.KILL_LEADER
                else rng.choice(self.cluster.members)
            )  # fmt: skip
            start = time.time()
            self.cluster.kill(member)
            self._pause(rng.uniform(0.5, 3.0))
            self.cluster.revive(member)
            self.cluster.wait_healthy()
            self._record(kind, member, start)
        elif kind is FaultKind.RESTART_CLUSTER:
            self.cluster.kill_all()
            self._pause(rng.uniform(0.2, 1.0))
            self.cluster.start_all()
            self.cluster.wait_healthy()
            self._record(kind, "all", start)
