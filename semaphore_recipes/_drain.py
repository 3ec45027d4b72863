"""Draining a semaphore, as a program both faces run (``Semaphore.drain``,
``AsyncSemaphore.drain``, ``semaphore-recipes drain``).

The drain flag is stored beside the capacity (``QueueDriver.set_draining``), so every
enqueue reads it in the request that reads the capacity, and every backend that opened
the semaphore tells its waiters as of a capacity change: they fail with Draining and
leave the queue. Holders are untouched. With ``wait``, the program then reads the
status until no holder is left: a store that cannot be reached makes each read raise
BackendUnavailable within the request timeout; the wait itself is bounded by its
timeout (DrainTimeout; the semaphore stays draining).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from ._core.deadline import Deadline
from ._core.program import Program
from ._core.status import Status
from .backend import Backend, Capability, QueueDriver
from .errors import DrainTimeout

#: How often ``drain(wait=True)`` reads the status while holders remain.
POLL_INTERVAL = 0.2


@dataclass(frozen=True)
class StoreRun:
    """Run ``program`` on the face's runner; answer: its value."""

    program: Program[object]


@dataclass(frozen=True)
class Pause:
    """Sleep ``seconds`` (blocking or awaited); answer: None."""

    seconds: float


def require_drain(backend: Backend) -> None:
    """NotSupported before any I/O when the store keeps no drain flag."""
    backend.capabilities.require(backend.scheme, Capability.DRAIN)


def draining(
    store: QueueDriver, draining: bool, wait: bool, deadline: Deadline
) -> Generator[StoreRun | Pause, object, Status | None]:
    """Set (``draining``) or clear the drain flag; with ``wait`` (only when setting),
    then wait for the last holder to release: the status it ended on."""
    yield StoreRun(store.set_draining(draining))
    if not (draining and wait):
        return None
    while True:
        status = yield StoreRun(store.status())
        assert isinstance(status, Status)
        if not status.holders:
            return status
        if deadline.expired():
            raise DrainTimeout(store.name, len(status.holders))
        yield Pause(deadline.cap(POLL_INTERVAL))
