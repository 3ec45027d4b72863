"""Awaiting one awaitable for at most so many seconds, without a task of its own.

``asyncio.wait_for`` before Python 3.12 runs what it awaits in a new task: a task made,
and one more turn of the event loop, per bounded call (two per uncontended
acquire+release on Redis). ``asyncio.timeout`` (3.11) cancels the awaiting task itself
at the deadline: the awaitable is cancelled where it waits, exactly as ``wait_for``
cancels its task, so what it does on cancellation (a connection closing itself) is the
same. Python 3.10 keeps ``wait_for``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["bounded"]

T = TypeVar("T")

if sys.version_info >= (3, 11):

    async def bounded(awaitable: Awaitable[T], timeout: float | None) -> T:
        """``await awaitable``; TimeoutError (``asyncio.TimeoutError``) after
        ``timeout`` seconds (None: no bound), the awaitable then cancelled."""
        async with asyncio.timeout(timeout):
            return await awaitable

else:  # Python 3.10

    async def bounded(awaitable: Awaitable[T], timeout: float | None) -> T:
        """``await awaitable``; TimeoutError (``asyncio.TimeoutError``) after
        ``timeout`` seconds (None: no bound), the awaitable then cancelled."""
        return await asyncio.wait_for(awaitable, timeout)
