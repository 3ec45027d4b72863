"""The storm nemesis: faults on different client slots overlap. Each slot has its own
seeded schedule of short client faults (`chaos/schedule.py`); server faults (leader or
member kill, whole-cluster restart) have their own schedule, one at a time. Storms
alternate with quiet stretches that start once every fault of the storm has healed, so
that liveness (judged only where no fault is active) is still judged."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .cluster import TestCluster
from .fleet import ClientSlot
from .injector import Injector, client_weights, pick, server_weights
from .model import Fault, FaultKind
from .schedule import FaultSchedule

STORM = (60.0, 90.0)  # seconds of overlapping faults
# Quiet after the storm's last fault healed: longer than the checker's recovery after a
# fault (2 session timeouts + 2 s) plus two stall limits (2 session timeouts each).
QUIET_SESSIONS = (7.0, 9.0)
SLOT_GAP = (0.1, 0.6)  # between one slot's faults
SERVER_GAP = (4.0, 12.0)  # between server faults


class Storm:
    def __init__(
        self,
        cluster: TestCluster,
        slots: list[ClientSlot],
        respawn: Callable[[ClientSlot], None],
        *,
        seed: str,
        session_timeout: float,
        log_path: Path,
    ) -> None:
        self.rng = random.Random(f"storm/{seed}")
        self.session = session_timeout
        self.stopping = threading.Event()
        self.storming = threading.Event()
        self.injector = Injector(
            cluster, respawn, session_timeout=session_timeout, log_path=log_path,
            stopping=self.stopping,
        )  # fmt: skip
        self.error: BaseException | None = None
        self.storms = 0

        def on_slot(slot: ClientSlot) -> Callable[[FaultKind, random.Random], None]:
            return lambda kind, rng: self.injector.client_fault(kind, slot, rng)

        self.schedules = [
            self._schedule(
                seed, f"slot/{slot.index}", client_weights(cluster), on_slot(slot), SLOT_GAP
            )
            for slot in slots
        ]
        self.schedules.append(
            self._schedule(
                seed, "server", server_weights(cluster), self.injector.server_fault, SERVER_GAP
            )
        )
        self._thread = threading.Thread(target=self._phases, name="storm", daemon=True)

    def _schedule(
        self,
        seed: str,
        name: str,
        weights: dict[FaultKind, float],
        inject: Callable[[FaultKind, random.Random], None],
        gap: tuple[float, float],
    ) -> FaultSchedule:
        return FaultSchedule(
            name, random.Random(f"storm/{seed}/{name}"), lambda rng: pick(rng, weights), inject,
            gap=gap, storming=self.storming, stopping=self.stopping,
        )  # fmt: skip

    @property
    def faults(self) -> list[Fault]:
        return self.injector.faults

    def start(self) -> None:
        for schedule in self.schedules:
            schedule.start()
        self._thread.start()

    def stop(self, timeout: float = 120.0) -> None:
        """Stop injecting; the faults in progress are healed before this returns."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        self._thread.join(timeout)
        for schedule in self.schedules:
            schedule.join(max(0.0, deadline - time.monotonic()))
        self.error = self.error or next((s.error for s in self.schedules if s.error), None)

    def _phases(self) -> None:
        try:
            while not self.stopping.is_set():
                self.storms += 1
                self.storming.set()
                if self.stopping.wait(self.rng.uniform(*STORM)):
                    break
                self.storming.clear()
                for schedule in self.schedules:  # quiet starts when the last fault healed
                    while not schedule.wait_idle(0.5):
                        if self.stopping.is_set():
                            return
                self.stopping.wait(self.session * self.rng.uniform(*QUIET_SESSIONS))
        except BaseException as exc:  # reported by the runner
            self.error = exc
            self.stopping.set()
        finally:
            self.storming.clear()
