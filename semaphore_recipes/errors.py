"""The error tree of semaphore_recipes.

Every failure is an exception; no call signals failure by returning ``False`` or
``None``. Errors raised because of bad input derive from :class:`ValueError` too and
are raised before any I/O.
"""

from __future__ import annotations

__all__ = [
    "AcquireTimeout",
    "BackendUnavailable",
    "CapacityMismatch",
    "CorruptState",
    "InvalidName",
    "PermitLost",
    "SemaphoreError",
    "WouldBlock",
]


class SemaphoreError(Exception):
    """Root of every error raised by semaphore_recipes."""


class AcquireTimeout(SemaphoreError, TimeoutError):
    """``acquire(timeout=...)`` ran out of time; the queue entry was removed."""


class WouldBlock(SemaphoreError):
    """``acquire(blocking=False)`` could not be granted at once; the entry was removed."""


class PermitLost(SemaphoreError):
    """The permit is not safely held: its session or lease ended, its entry was deleted,
    or (for :meth:`Permit.check`) the connection is suspended. Stop touching the resource."""


class CapacityMismatch(SemaphoreError, ValueError):
    """The capacity asked for differs from the one stored for this semaphore."""

    def __init__(self, name: str, requested: int, stored: int) -> None:
        super().__init__(
            f"semaphore {name!r} is stored with capacity {stored}, not {requested}; "
            "pass adopt_capacity=True to use the stored value or call set_capacity()"
        )
        self.name = name
        self.requested = requested
        self.stored = stored


class InvalidName(SemaphoreError, ValueError):
    """A semaphore name, root, prefix or URL path that the library refuses."""


class BackendUnavailable(SemaphoreError, ConnectionError):
    """The coordination service could not be reached (raised ``from`` the client error)."""


class CorruptState(SemaphoreError):
    """Data stored under the semaphore's root is not what this library writes."""
