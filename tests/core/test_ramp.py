"""The capacity ramp's values: ``STEP/INTERVAL`` text, the steps a plan takes, and its
stored form read back strictly."""

from __future__ import annotations

import pytest

import semaphore_recipes as sr
from semaphore_recipes.errors import CorruptState


@pytest.mark.parametrize(
    ("text", "step", "interval"),
    [("2/30s", 2, 30.0), ("1/500ms", 1, 0.5), ("5/2m", 5, 120.0), ("3/1.5", 3, 1.5),
     (" 1 / 1h ", 1, 3600.0)],
)  # fmt: skip
def test_ramp_text_is_step_slash_interval(text: str, step: int, interval: float) -> None:
    assert sr.parse_ramp(text) == sr.Ramp(step, interval)


@pytest.mark.parametrize("text", ["", "2", "2/", "/3s", "0/1s", "2/0s", "2/1x", "-1/1s", "a/b"])
def test_malformed_ramp_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        sr.parse_ramp(text)


def test_a_plan_steps_towards_its_target_and_ends_there() -> None:
    up = sr.RampPlan(7, 2, 1.0, next_at=0.0, by="me", since=0.0)
    assert [up.next_capacity(c) for c in (1, 5, 6, 7)] == [3, 7, 7, 7]
    down = sr.RampPlan(2, 3, 1.0, next_at=0.0, by="me", since=0.0)
    assert [down.next_capacity(c) for c in (9, 4, 2)] == [6, 2, 2]
    assert up.after_step(7, 50.0) is None
    later = up.after_step(5, 50.0)
    assert later is not None and later.next_at == 51.0 and up.same_plan(later)
    assert not up.same_plan(sr.RampPlan(7, 2, 1.0, next_at=0.0, by="me", since=1.0))
    assert not up.stalled(1.0) and up.stalled(1.01)


def test_a_stored_plan_reads_back_and_a_corrupt_one_is_refused() -> None:
    plan = sr.RampPlan(7, 2, 0.5, next_at=12.5, by="host:1", since=10.0)
    assert sr.RampPlan.decode("s", plan.encode()) == plan
    assert sr.RampPlan.decode("s", None) is None and sr.RampPlan.decode("s", "") is None
    for bad in ("{", "[]", '{"target": 1}', plan.encode().replace('"step":2', '"step":0')):
        with pytest.raises(CorruptState):
            sr.RampPlan.decode("s", bad)
