"""``wait_until``: poll a condition until it holds, or fail the test after a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02
) -> None:
    """Return once ``predicate()`` is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)
