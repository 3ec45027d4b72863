"""One deadline for a whole operation, read through an injected clock."""

from __future__ import annotations

import math
from collections.abc import Callable


def validate_timeout(timeout: float | None) -> float | None:
    """Return ``timeout`` if it is None or a finite number >= 0, else raise ValueError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
    if math.isnan(timeout) or timeout < 0 or math.isinf(timeout):
        raise ValueError(f"timeout must be a finite number of seconds >= 0, not {timeout!r}")
    return float(timeout)


class Deadline:
    """The moment an operation must give up, fixed once at its start.

    Every wait inside the operation asks :meth:`remaining` instead of starting a fresh
    timeout, so retries and wake-ups never stretch the time the caller allowed.
    """

    __slots__ = ("_clock", "_end")

    def __init__(self, timeout: float | None, clock: Callable[[], float]) -> None:
        timeout = validate_timeout(timeout)
        self._clock = clock
        self._end = None if timeout is None else clock() + timeout

    @property
    def unbounded(self) -> bool:
        return self._end is None

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None for no deadline."""
        if self._end is None:
            return None
        return max(0.0, self._end - self._clock())

    def expired(self) -> bool:
        return self._end is not None and self._clock() >= self._end

    def cap(self, seconds: float) -> float:
        """``seconds``, shortened to the time left."""
        left = self.remaining()
        return seconds if left is None else min(seconds, left)


#: The least time the one reply an acquire needs is awaited when the caller's timeout
#: is shorter (``timeout=0``: "only if it can be granted now" takes one reply to know).
#: A store that takes longer for one round trip is taken as unreachable.
ONE_REPLY_FLOOR = 1.0


def one_reply_deadline(
    deadline: Deadline, request_timeout: float, clock: Callable[[], float]
) -> Deadline | None:
    """The deadline of a request whose reply an acquire must await (its first try, the
    slot steps of an admitted entry), or None where the caller's ``deadline`` is long
    enough: a caller's timeout of at least :data:`ONE_REPLY_FLOOR` (or the request
    timeout, if shorter) is kept to the letter; a shorter one gets that much."""
    floor = min(request_timeout, ONE_REPLY_FLOOR)
    left = deadline.remaining()
    if left is None or left >= floor:
        return None
    return Deadline(floor, clock)
