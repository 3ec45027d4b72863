"""``interrupt_acquires``: acquires interrupted (KeyboardInterrupt; through the asyncio
face's blocking view, the awaiting task's cancellation) at random points."""

from __future__ import annotations

import _thread
import random
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["interrupt_acquires"]


def interrupt_acquires(
    acquire: Callable[[], Any], seed: int, wanted: int = 8, most: int = 200
) -> tuple[int, list[Any]]:
    """Call ``acquire`` (and release what it returns) with a KeyboardInterrupt of the main
    thread (through the blocking view of the asyncio face: the task's cancellation) timed
    at random within one acquire+release's duration, measured first on this store and
    this machine now (a fixed window let a fast store finish before most timers fired),
    until ``wanted`` interrupts landed inside ``acquire`` or ``most`` calls were made.
    Returns how many landed inside, and the permits it returned."""
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
