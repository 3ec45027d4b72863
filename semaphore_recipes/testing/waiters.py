"""``waiter_thread``: an acquire waiting in a thread of its own, for tests that need a
waiter in the queue while they go on."""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["waiter_thread"]


def waiter_thread(sem: Any, timeout: float = 30) -> tuple[threading.Thread, list[Any]]:
    """``sem.acquire(timeout)`` in a daemon thread; its list gets (granted at, permit)."""
    out: list[Any] = []

    def run() -> None:
        permit = sem.acquire(timeout=timeout)
        out.append((time.monotonic(), permit))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out
