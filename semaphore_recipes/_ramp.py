"""Ramping a semaphore's capacity, as programs both faces run (``set_capacity(n,
ramp=Ramp(step, interval))``, ``resume_ramp``, ``cancel_ramp``; ``semaphore-recipes
set-capacity NAME N --ramp STEP/INTERVAL``, ``--resume``, ``--cancel``).

The plan (target, step, interval, when the next step is due, who started it) is
stored beside the capacity, and every step is one ordinary capacity change written
with the next plan over the config's version as the status read it
(``QueueDriver.write_ramp``): of two clients running the same plan, one step's write
wins and the other reads again, so no step is applied twice. The client running the
ramp sleeps until the next step is due, reads the status (a plan gone or replaced
stops it: cancelled) and writes the step. If it dies, the plan stays in the store
(``status`` shows it, stalled once overdue by an interval); a resume applies an
overdue step at once, then one step per interval (never a jump to the target).
Connection loss: each request raises BackendUnavailable within the request timeout
(the plan stays stored; a resume continues it); each pause lasts at most an interval.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator
from dataclasses import dataclass

from ._core.ramp import Ramp, RampPlan
from ._core.status import Status
from ._drain import Pause, StoreRun
from .backend import Backend, Capability, QueueDriver, validate_capacity

__all__ = ["RampEnd", "Stepped", "cancelling", "ramping", "require_ramp"]


@dataclass(frozen=True)
class Stepped:
    """A step was applied: ``capacity`` stored at config ``version``; answer: None
    (the face calls its ``on_step`` callback)."""

    capacity: int
    version: int


class RampEnd(enum.Enum):
    """How a ramp program ended."""

    DONE = "done"  #: the capacity is the target, the plan is gone
    CANCELLED = "cancelled"  #: the plan was dropped or replaced by another client
    NO_PLAN = "no plan"  #: a resume found no plan stored


def require_ramp(backend: Backend) -> None:
    """NotSupported before any I/O when the store keeps no ramp plan."""
    backend.capabilities.require(backend.scheme, Capability.RAMP)


def new_plan(target: int, ramp: Ramp, by: str, now: float) -> RampPlan:
    """A plan to start: its first step is due at once (ValueError on a bad target)."""
    validate_capacity(target)
    return RampPlan(target, ramp.step, float(ramp.interval), now, by, now)


def ramping(
    store: QueueDriver, start: RampPlan | None, now: Callable[[], float]
) -> Generator[StoreRun | Pause | Stepped, object, RampEnd]:
    """Run the plan ``start`` (replacing any stored one), or the stored plan (None: a
    resume) until the capacity is its target; ``now``: Unix time."""
    status = yield from _read(store)
    plan = start if start is not None else status.ramp
    if plan is None:
        return RampEnd.NO_PLAN
    replacing = start is not None  # until our first write: the stored plan is not ours
    while True:
        if not replacing:
            if not plan.same_plan(status.ramp):
                done = status.ramp is None and status.capacity == plan.target
                return RampEnd.DONE if done else RampEnd.CANCELLED
            assert status.ramp is not None
            plan = status.ramp  # (another runner of it may have stepped)
        wait = plan.next_at - now()
        if wait > 0:
            yield Pause(wait)
            status = yield from _read(store)
            continue
        capacity = plan.next_capacity(status.capacity)
        after = plan.after_step(capacity, now())
        written = yield StoreRun(store.write_ramp(capacity, after, status.config_version))
        if written is None:  # the config changed since our read: read it again
            status = yield from _read(store)
            continue
        assert isinstance(written, int)
        yield Stepped(capacity, written)
        if after is None:
            return RampEnd.DONE
        replacing = False
        status = Status(
            status.name,
            capacity,
            status.holders,
            status.waiters,
            status.draining,
            ramp=after,
            config_version=written,
        )


def cancelling(store: QueueDriver) -> Generator[StoreRun, object, bool]:
    """Drop the stored plan, keeping the capacity where it is: False when there was
    none (a client running it stops at its next step)."""
    while True:
        status = yield from _read(store)
        if status.ramp is None:
            return False
        written = yield StoreRun(store.write_ramp(status.capacity, None, status.config_version))
        if written is not None:
            return True


def _read(store: QueueDriver) -> Generator[StoreRun, object, Status]:
    status = yield StoreRun(store.status())
    assert isinstance(status, Status)
    return status
