"""A capacity ramp: how fast the capacity moves (:class:`Ramp`), and the plan stored
beside the capacity while it moves (:class:`RampPlan`; docs/design.md, capacity ramp).

Pure values, no I/O: a plan is decided from a status read and written back with the
capacity step it goes with, in one compare-and-set of the config's version, so two
clients running the same plan cannot both apply a step. Times are Unix times (the
writer's clock): the plan must mean the same to another process after a crash.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace

from ..errors import CorruptState
from .names import MAX_CAPACITY

__all__ = ["Ramp", "RampPlan", "parse_ramp"]

_RAMP_TEXT = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Ramp:
    """Move the capacity by at most ``step`` permits every ``interval`` seconds.
    ValueError/TypeError when either is not positive (before any I/O)."""

    step: int
    interval: float

    def __post_init__(self) -> None:
        if isinstance(self.step, bool) or not isinstance(self.step, int):
            raise TypeError(f"ramp step must be an int, not {self.step!r}")
        if not 1 <= self.step <= MAX_CAPACITY:
            raise ValueError(f"ramp step must be in 1..{MAX_CAPACITY}, not {self.step}")
        if isinstance(self.interval, bool) or not isinstance(self.interval, (int, float)):
            raise TypeError(f"ramp interval must be a number of seconds, not {self.interval!r}")
        if not (math.isfinite(self.interval) and self.interval > 0):
            raise ValueError(
                f"ramp interval must be a positive number of seconds, not {self.interval}"
            )


def parse_ramp(text: str) -> Ramp:
    """``STEP/INTERVAL`` (``2/30s``, ``1/500ms``, ``5/2m``; seconds without a unit) ->
    a Ramp; ValueError when malformed."""
    match = _RAMP_TEXT.match(text)
    if match is None:
        raise ValueError(
            f"bad ramp {text!r}: expected STEP/INTERVAL, e.g. 2/30s (units ms, s, m, h)"
        )
    step, amount, unit = match.groups()
    return Ramp(int(step), float(amount) * _UNIT_SECONDS[unit or "s"])


@dataclass(frozen=True)
class RampPlan:
    """A ramp under way: move towards ``target`` by ``step`` every ``interval`` s; the
    next step is due at ``next_at``; started by ``by`` at ``since`` (both name the plan:
    a plan with another ``(by, since)`` replaced it)."""

    target: int
    step: int
    interval: float
    next_at: float
    by: str
    since: float

    def next_capacity(self, current: int) -> int:
        """The capacity one step from ``current`` towards the target."""
        if current < self.target:
            return min(self.target, current + self.step)
        return max(self.target, current - self.step)

    def after_step(self, capacity: int, now: float) -> RampPlan | None:
        """The plan once ``capacity`` is applied at ``now``: None when it is the target
        (the plan ends with the step that reaches it); else the next step one interval
        later (an overdue step is never caught up: one step at a time)."""
        if capacity == self.target:
            return None
        return replace(self, next_at=now + self.interval)

    def stalled(self, now: float) -> bool:
        """The next step is overdue by more than an interval: nobody is running it
        (``set-capacity NAME --resume`` continues it)."""
        return now > self.next_at + self.interval

    def same_plan(self, other: RampPlan | None) -> bool:
        """``other`` is this plan, maybe steps further on (the same ``by`` and ``since``),
        not a plan that replaced it."""
        return other is not None and (other.by, other.since) == (self.by, self.since)

    def to_doc(self) -> dict[str, object]:
        """The plan as a JSON object, as ZooKeeper's and etcd's config stores it."""
        return {
            "target": self.target,
            "step": self.step,
            "interval": self.interval,
            "next_at": self.next_at,
            "by": self.by,
            "since": self.since,
        }

    def encode(self) -> str:
        """The plan as stored where the config is not JSON (Redis, SQL, memory)."""
        return json.dumps(self.to_doc(), separators=(",", ":"))

    @classmethod
    def from_doc(cls, name: str, doc: object) -> RampPlan:
        """A stored plan (:meth:`to_doc`); CorruptState when it is not one."""
        try:
            assert isinstance(doc, dict)
            plan = cls(
                int(doc["target"]),
                int(doc["step"]),
                float(doc["interval"]),
                float(doc["next_at"]),
                str(doc["by"]),
                float(doc["since"]),
            )
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise CorruptState(f"semaphore {name!r}: unreadable stored ramp {doc!r}") from exc
        if plan.target < 1 or plan.step < 1 or not plan.interval > 0:
            raise CorruptState(f"semaphore {name!r}: stored ramp {doc!r} is out of range")
        return plan

    @classmethod
    def decode(cls, name: str, text: str | bytes | None) -> RampPlan | None:
        """A plan as :meth:`encode` stored it; None for no plan (None or empty)."""
        if not text:
            return None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise CorruptState(f"semaphore {name!r}: unreadable stored ramp {text!r}") from exc
        return cls.from_doc(name, doc)
