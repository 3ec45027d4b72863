"""Retrying what failed with UNAVAILABLE, and the backoff of the streams' reconnects.

Nothing in the etcd layer retries behind the caller's back: a call that could not reach
a healthy member raises :class:`EtcdUnavailable`, and the caller that knows its request
is safe to repeat says so by making it through :func:`retrying` (a program: the sync and
the asyncio face run the same retry) or :func:`retry_unavailable` (blocking).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .._core.deadline import Deadline
from .._core.program import Program, run_program
from .errors import EtcdUnavailable
from .rpc import Pause

__all__ = ["Backoff", "retry_unavailable", "retrying"]

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
    """Call ``attempt(timeout)`` until it does not raise :class:`EtcdUnavailable`,
    blocking: :func:`retrying` run with ``time.sleep`` for its pauses."""

    def wait(request: object) -> object:
        if isinstance(request, Pause):
            time.sleep(request.seconds)
            return None
        assert isinstance(request, _Attempt)
        return attempt(request.timeout)

    answer: T = run_program(
        retrying(
            _Attempt,
            deadline,
            attempt_timeout=attempt_timeout,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            stop=stop,
        ),
        wait,
    )
    return answer


@dataclass(frozen=True)
class _Attempt:
    timeout: float


def retrying(
    make: Callable[[float], object],
    deadline: Deadline,
    *,
    attempt_timeout: float,
    initial_backoff: float = 0.05,
    max_backoff: float = 0.05,
    stop: Callable[[], bool] | None = None,
) -> Program[Any]:
    """A program that yields ``make(timeout)`` (a :class:`~.rpc.Call`) until its answer
    is not :class:`EtcdUnavailable`, and returns that answer.

    Each attempt is given ``attempt_timeout`` seconds, shortened to what is left of
    ``deadline`` (the first attempt is made even if it has passed). Between attempts it
    yields a :class:`~.rpc.Pause` of a :class:`Backoff` from ``initial_backoff`` to
    ``max_backoff``, never past the deadline. The last :class:`EtcdUnavailable` is
    raised when ``deadline`` has passed, or when ``stop()`` (asked before each retry) is
    true. Any other error is raised at once. Only use it for requests that are safe to
    repeat: a failed attempt may have been applied.
    """
    backoff = Backoff(initial_backoff, max_backoff)
    while True:
        try:
            return (yield make(deadline.cap(attempt_timeout) or 0.001))
        except EtcdUnavailable as exc:
            if deadline.expired():
                raise
            pause = deadline.cap(backoff.next()) or 0.0
            logger.debug("etcd unavailable (%s), retrying in %.3f s", exc, pause)
            yield Pause(pause)
            if stop is not None and stop():
                raise
