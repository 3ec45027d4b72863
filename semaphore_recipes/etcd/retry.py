"""Retrying what failed with UNAVAILABLE, and the backoff of the streams' reconnects.

Nothing in the etcd layer retries behind the caller's back: a call that could not reach
a healthy member raises :class:`EtcdUnavailable`, and the caller that knows its request
is safe to repeat says so by calling it through :func:`retry_unavailable`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from .._core.deadline import Deadline
from .errors import EtcdUnavailable

__all__ = ["Backoff", "retry_unavailable"]

logger = logging.getLogger("semaphore_recipes.etcd")

T = TypeVar("T")


class Backoff:
    """Pauses that double from ``initial`` up to ``maximum`` (equal: a constant pause)."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.current = initial

    def reset(self) -> None:
        self.current = self.initial

    def next(self) -> float:
        value = self.current
        self.current = min(self.current * 2, self.maximum)
        return value


def retry_unavailable(
    attempt: Callable[[float], T],
    deadline: Deadline,
    *,
    attempt_timeout: float,
    initial_backoff: float = 0.05,
    max_backoff: float = 0.05,
    stop: Callable[[], bool] | None = None,
) -> T:
    """Call ``attempt(timeout)`` until it does not raise :class:`EtcdUnavailable`.

    Each attempt is given ``attempt_timeout`` seconds, shortened to what is left of
    ``deadline`` (the first attempt is made even if it has passed). Between attempts it
    sleeps a :class:`Backoff` from ``initial_backoff`` to ``max_backoff``, never past the
    deadline. The last :class:`EtcdUnavailable` is raised when ``deadline`` has passed,
    or when ``stop()`` (asked before each retry) is true. Any other error is raised at
    once. Only use it for requests that are safe to repeat: a failed attempt may have
    been applied.
    """
    backoff = Backoff(initial_backoff, max_backoff)
    while True:
        try:
            return attempt(deadline.cap(attempt_timeout) or 0.001)
        except EtcdUnavailable as exc:
            if deadline.expired():
                raise
            pause = deadline.cap(backoff.next())
            logger.debug("etcd unavailable (%s), retrying in %.3f s", exc, pause)
            time.sleep(pause)
            if stop is not None and stop():
                raise
