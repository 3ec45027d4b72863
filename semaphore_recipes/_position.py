"""The position reports of one waiting acquire (``acquire(on_position=...)``).

While the acquire waits, its program (``_acquire.py``) reads the queue's status at most
once per interval and hands the caller a :class:`~._core.position.Position`; an acquire
without ``on_position`` makes no such read. A read that fails (the store unreachable
within the request timeout, the semaphore deleted) reports nothing and the wait goes
on; none is made in the last request timeout before the acquire's deadline, so a read
that the store never answers cannot carry the acquire past its timeout.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ._core.deadline import Deadline
from ._core.position import Position, position_in
from ._core.status import Status

#: seconds between two reads of the queue for one waiting acquire, by default
DEFAULT_POSITION_INTERVAL = 1.0

PositionCallback = Callable[[Position], object]


def validate_position_arguments(on_position: object, interval: object) -> None:
    """``on_position``: a callable or None; ``position_interval``: seconds > 0 (before
    any I/O)."""
    if on_position is not None and not callable(on_position):
        raise TypeError(f"on_position must be callable, not {type(on_position).__name__}")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        raise TypeError(f"position_interval is a number of seconds, not {interval!r}")
    if not (interval > 0 and math.isfinite(interval)):
        raise ValueError(f"position_interval must be a finite number > 0, not {interval!r}")


class PositionReports:
    """When the next read of the queue is due, and the report made from it."""

    def __init__(
        self,
        on_position: PositionCallback,
        interval: float,
        request_timeout: float,
        clock: Callable[[], float],
        started: float,
    ) -> None:
        self._on_position = on_position
        self._interval = interval
        self._request_timeout = request_timeout
        self._clock = clock
        self._started = started
        self._next = started  # the first read when the acquire first waits

    def _reading(self, deadline: Deadline) -> bool:
        """Reads are made until the last request timeout before ``deadline``."""
        remaining = deadline.remaining()
        return remaining is None or remaining >= self._request_timeout

    def due(self, deadline: Deadline) -> bool:
        """Is a read due now?"""
        return self._reading(deadline) and self._clock() >= self._next

    def wait_for(self, timeout: float | None, deadline: Deadline) -> float | None:
        """An event wait of ``timeout`` seconds, cut to end when the next read is due."""
        if not self._reading(deadline):
            return timeout
        until_next = max(0.0, self._next - self._clock())
        return until_next if timeout is None else min(timeout, until_next)

    def read(self, status: Status | None, token: int) -> None:
        """The answer of the read made (None: it failed): report our position in it."""
        now = self._clock()
        self._next = now + self._interval
        position = None if status is None else position_in(status, token, now - self._started)
        if position is not None:
            self._on_position(position)
