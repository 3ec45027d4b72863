"""Leaving a queue without a permit, within the caller's time.

An acquire that ends without a permit (its timeout, ``blocking=False``, an exception,
Ctrl-C, a cancelled task) removes its entry. The caller waits for the store to confirm
the removal at most :data:`CONFIRM_WAIT`: one round trip on a store that answers, so the
next waiter is woken as by a release. When the store does not answer (a partition, a
paused server) the caller has its answer at its deadline anyway, and the removal goes
on in the background: each store retries it until it lands or the session ends, and the
session's end removes the entry in any case. Such a removal is logged (INFO) and told
to the instrumentation (``removal_deferred``: the Prometheus counter
``semaphore_recipes_removals_deferred_total``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from .instrumentation import Instrumentation, report

log = logging.getLogger("semaphore_recipes")

__all__ = ["CONFIRM_WAIT", "leave", "leave_async", "leave_in_background", "release_awaited"]

#: How long a caller waits for the store to confirm its entry's removal.
CONFIRM_WAIT = 0.3

#: removals still awaited by nobody (a task nobody holds may be collected mid-way)
_detached: set[asyncio.Future[None]] = set()


def leave(
    remove: Callable[[], None], name: str, request_timeout: float, instrumentation: Instrumentation
) -> None:
    """Run ``remove`` (a store's blocking removal, itself bounded by the request timeout
    before it goes on in the store's background) on a thread of its own, and wait for
    it at most :data:`CONFIRM_WAIT`. A second Ctrl-C ends the wait, not the removal."""
    done = threading.Event()

    def run() -> None:
        try:
            remove()
        except Exception:  # a store's removal never raises; if it does, say so
            log.exception("semaphore %r: removing an abandoned entry failed", name)
        finally:
            done.set()

    threading.Thread(target=run, name=f"semaphore-recipes leave {name}", daemon=True).start()
    if not done.wait(min(request_timeout, CONFIRM_WAIT)):
        _deferred(name, instrumentation)


async def leave_async(
    removal: Awaitable[None], name: str, request_timeout: float, instrumentation: Instrumentation
) -> None:
    """Await ``removal`` at most :data:`CONFIRM_WAIT`; it goes on after that, and when
    the awaiting task is cancelled meanwhile."""
    task = asyncio.ensure_future(removal)
    if task.done():
        return
    _detached.add(task)
    task.add_done_callback(_detached.discard)
    done, _ = await asyncio.wait({task}, timeout=min(request_timeout, CONFIRM_WAIT))
    if not done:
        _deferred(name, instrumentation)


def leave_in_background(
    loop: asyncio.AbstractEventLoop, removal: Coroutine[Any, Any, None]
) -> None:
    """Run ``removal`` as a task of ``loop``, waited for by nobody (an acquire program
    closed where nothing can be awaited); a loop already closed drops it (the session's
    end removes the entry)."""
    try:
        task = loop.create_task(removal)
    except RuntimeError:
        removal.close()
        log.info("a removal was dropped: its event loop is closed")
        return
    _detached.add(task)
    task.add_done_callback(_detached.discard)


async def release_awaited(removal: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """A release's ``removal()``, awaited in the calling task rather than shielded in one
    of its own (a task and two more turns of the loop per release). Cancelled, it is
    sent again from a task of its own, and the cancel goes on: the first may have been
    applied, and a store's removal may run twice (``QueueDriver.remove``)."""
    try:
        await removal()
    except asyncio.CancelledError:
        leave_in_background(asyncio.get_running_loop(), removal())
        raise


def _deferred(name: str, instrumentation: Instrumentation) -> None:
    log.info(
        "semaphore %r: the store has not confirmed the removal of an abandoned entry "
        "within %g s; it goes on in the background (the session's end removes it anyway)",
        name,
        CONFIRM_WAIT,
    )
    report(instrumentation.removal_deferred, name)
