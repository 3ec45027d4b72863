"""One seeded fault schedule of the storm (`chaos/storm.py`): a fault, a short gap, the
next fault... but only while the storm is on. Each client slot has its own (so faults
on different slots overlap, never two on one slot), and the server faults have one."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from .model import FaultKind

# how long a schedule looks again at a phase change or a stop request
_POLL = 0.2


class FaultSchedule:
    def __init__(
        self,
        name: str,
        rng: random.Random,
        choose: Callable[[random.Random], FaultKind],
        inject: Callable[[FaultKind, random.Random], None],
        *,
        gap: tuple[float, float],
        storming: threading.Event,
        stopping: threading.Event,
    ) -> None:
        self.name = name
        self.rng = rng
        self.choose = choose
        self.inject = inject
        self.gap = gap
        self.storming = storming
        self.stopping = stopping
        self.error: BaseException | None = None
        self._idle = threading.Event()  # set while no fault of this schedule is active
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name=f"schedule-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def wait_idle(self, timeout: float) -> bool:
        """True once no fault of this schedule is active (a phase change waits for it)."""
        return self._idle.wait(timeout)

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                if not self.storming.wait(_POLL):
                    continue
                if self.stopping.wait(self.rng.uniform(*self.gap)):
                    break
                # The idle flag drops before the storm is looked at again, so a phase
                # change that clears `storming` then waits for idle sees this fault.
                self._idle.clear()
                try:
                    if self.storming.is_set() and not self.stopping.is_set():
                        self.inject(self.choose(self.rng), self.rng)
                finally:
                    self._idle.set()
        except BaseException as exc:  # reported by the runner
            self.error = exc
            self.stopping.set()
