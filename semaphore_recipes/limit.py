"""``sem.limit()``: a decorator that runs each call of a function under a permit.

``Semaphore.limit(permits, timeout=...)`` wraps a plain function and
``AsyncSemaphore.limit`` a coroutine function: each call acquires ``permits`` with
``acquire(permits, timeout)`` (the FIFO wait, its bound, what it raises: AcquireTimeout,
BackendUnavailable...), runs the function, and releases on every way out (return,
exception, KeyboardInterrupt, the task's cancellation). A call that is not granted does
not run the function. The arguments are checked when ``limit()`` is called, before any
I/O; the kind of function when the decorator is applied: a coroutine function on the
sync face (or a plain one on the asyncio face) would hold its permit only while its
coroutine is made, and a generator only while it is made, so those are TypeErrors.

What the permit does while the function runs (connection loss, a lost session) is the
permit's: a function that must know takes the permit itself (``with sem.acquire(...) as
permit``) and checks ``permit.lost``. One class serves both faces: what differs is only
whether the call is awaited.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Generic, ParamSpec, TypeVar

from ._core.deadline import validate_timeout

__all__ = ["AsyncLimit", "Limit"]

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M")


class _CallLimit(Generic[M]):
    """The checked arguments of ``limit()`` and the permit's ``acquire`` for one call."""

    def __init__(
        self, acquire: Callable[[int, float | None], M], permits: int, timeout: float | None
    ):
        validate_timeout(timeout)
        self._acquire = acquire
        self.permits = permits
        self.timeout = timeout

    def _permit(self) -> M:
        """The acquire of one call, as a context manager (entered by the wrapper)."""
        return self._acquire(self.permits, self.timeout)

    def _check_kind(self, fn: Callable[..., object], *, coroutine: bool) -> None:
        """TypeError unless ``fn`` is a coroutine function exactly when ``coroutine``,
        and no generator (its permit would cover only the generator's making)."""
        if not callable(fn):
            raise TypeError(f"limit() decorates a function, not {type(fn).__name__}")
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(f"limit() cannot hold a permit across a generator: {fn!r}")
        if inspect.iscoroutinefunction(fn) != coroutine:
            face = "AsyncSemaphore.limit()" if coroutine else "Semaphore.limit()"
            kind = "coroutine functions" if coroutine else "plain functions"
            raise TypeError(f"{face} decorates {kind}, not {fn!r}")


class Limit(_CallLimit[AbstractContextManager[Any]]):
    """``Semaphore.limit()``: decorates a plain function; each call runs holding the
    permits (see the module docstring)."""

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        self._check_kind(fn, coroutine=False)

        @functools.wraps(fn)
        def limited(*args: P.args, **kwargs: P.kwargs) -> R:
            with self._permit():
                return fn(*args, **kwargs)

        return limited


class AsyncLimit(_CallLimit[AbstractAsyncContextManager[Any]]):
    """``AsyncSemaphore.limit()``: decorates a coroutine function; each call runs
    holding the permits, released also when the task is cancelled."""

    def __call__(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        self._check_kind(fn, coroutine=True)

        @functools.wraps(fn)
        async def limited(*args: P.args, **kwargs: P.kwargs) -> R:
            async with self._permit():
                return await fn(*args, **kwargs)

        return limited
