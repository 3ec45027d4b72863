"""Capacity ramps (``set_capacity(n, ramp=Ramp(step, interval))``, ``resume_ramp``,
``cancel_ramp``): each step an ordinary versioned capacity change, waiters granted as
the capacity rises, the plan stored beside the capacity (seen by ``status``), a plan
left by a dead client resumed one step at a time, concurrent resumers applying each
step once, and a plain capacity change cancelling it; on every store that declares
it, both faces."""

from __future__ import annotations

import threading
import time

import pytest

import semaphore_recipes as sr
from semaphore_recipes.backend import Capability
from semaphore_recipes.registry import backend_class
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.polling import wait_until

INTERVAL = 0.3


class _Died(Exception):
    """Stands for the death of the client running a ramp, after a step."""


def _ramps(service: Harness) -> None:
    if not backend_class(service.kind).capabilities.has(Capability.RAMP):
        pytest.skip(f"the {service.kind} backend keeps no ramp plan")


def _die_after_first_step(capacity: int, version: int) -> None:
    raise _Died


def _leave_a_plan(sem: sr.Semaphore, target: int, step: int, interval: float) -> None:
    """Start a ramp whose client dies after its first step: the plan stays stored."""
    with pytest.raises(_Died):
        sem.set_capacity(target, ramp=sr.Ramp(step, interval), on_step=_die_after_first_step)


def test_a_ramp_steps_the_capacity_and_grants_waiters_as_it_rises(service: Harness) -> None:
    _ramps(service)
    admin = service.connect().semaphore("rmp", capacity=2)
    # (two clients, few sessions: MySQL renews each on a connection of its own)
    holding, waiters = service.connect(), service.connect()
    holders = [holding.semaphore("rmp", capacity=2).acquire() for _ in range(2)]
    granted: list[object] = []

    def wait_for_a_permit() -> None:
        granted.append(waiters.semaphore("rmp", capacity=2).acquire(timeout=20))

    waiting = [threading.Thread(target=wait_for_a_permit) for _ in range(4)]
    for thread in waiting:
        thread.start()
    wait_until(lambda: len(admin.status().waiters) == 4)
    steps: list[tuple[int, int]] = []
    # (long enough for the status reads below to see the capacity at 4 on a loaded
    # machine: one read of MySQL's took longer than 0.3 s there, and none saw it)
    interval = 3 * INTERVAL
    ramp = threading.Thread(
        target=admin.set_capacity,
        args=(6,),
        kwargs={"ramp": sr.Ramp(2, interval), "on_step": lambda c, v: steps.append((c, v))},
    )
    seen: list[sr.Status] = []
    slowest = 0.0  # the longest status read: one longer than the interval can miss a step
    ramp.start()
    while ramp.is_alive():
        started = time.monotonic()
        seen.append(admin.status())
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.05)
    ramp.join()
    for thread in waiting:
        thread.join(10)
    assert len(granted) == 4
    assert [c for c, _ in steps] == [4, 6], steps
    assert steps[0][1] < steps[1][1]  # each step a new version of the config
    assert all(s.used <= s.capacity for s in seen)
    # at 4, the two waiters ahead were granted while the plan (to 6) was stored
    at_four = [s for s in seen if s.capacity == 4 and s.used == 4]
    if slowest < interval / 3:  # (reads that slow, on a loaded machine, may see only 6)
        assert at_four, [(s.capacity, s.used) for s in seen]
    for status in at_four:
        plan = status.ramp
        assert plan is not None and (plan.target, plan.step, plan.interval) == (6, 2, interval)
        assert len(status.waiters) == 2
    final = admin.status()
    assert final.capacity == 6 and final.used == 6 and final.ramp is None
    assert final.config_version == steps[1][1]
    for permit in [*holders, *granted]:
        permit.release()  # type: ignore[attr-defined]


def test_a_plan_left_by_a_dead_client_is_resumed_one_step_at_a_time(service: Harness) -> None:
    _ramps(service)
    admin = service.connect().semaphore("rmp-resume", capacity=1)
    # (the test sleeps two of them; one must outlast a step's status read and write on
    # a loaded machine, which took longer than 0.15 s on MySQL)
    interval = 2 * INTERVAL
    _leave_a_plan(admin, 7, 2, interval)
    status = admin.status()
    assert status.capacity == 3 and status.ramp is not None and status.ramp.target == 7
    time.sleep(2 * interval + 0.05)  # overdue by more than an interval: stalled
    status = admin.status()
    assert status.ramp is not None and status.ramp.stalled(time.time())
    steps: list[tuple[int, float]] = []
    started = time.monotonic()
    assert admin.resume_ramp(on_step=lambda c, v: steps.append((c, time.monotonic())))
    # the overdue step at once, the next one an interval later: never a jump
    assert [c for c, _ in steps] == [5, 7]
    assert steps[0][1] - started < interval
    assert steps[1][1] - steps[0][1] >= interval * 0.9
    assert admin.status().ramp is None
    assert not admin.resume_ramp()  # nothing left to resume


def test_two_resumers_apply_each_step_once(service: Harness) -> None:
    _ramps(service)
    first = service.connect().semaphore("rmp-two", capacity=1)
    second = service.connect().semaphore("rmp-two", capacity=1)
    _leave_a_plan(first, 7, 2, INTERVAL)
    applied: list[tuple[int, int]] = []
    lock = threading.Lock()

    def note(capacity: int, version: int) -> None:
        with lock:
            applied.append((capacity, version))

    resumers = [
        threading.Thread(target=sem.resume_ramp, kwargs={"on_step": note})
        for sem in (first, second)
    ]
    for thread in resumers:
        thread.start()
    for thread in resumers:
        thread.join(20)
    assert not any(t.is_alive() for t in resumers)
    applied.sort(key=lambda step: step[1])
    # each step once, in version order: no step applied twice, none skipped
    assert [c for c, _ in applied] == [5, 7], applied
    status = first.status()
    assert status.capacity == 7 and status.ramp is None


def test_a_plain_capacity_change_or_a_cancel_drops_the_plan(service: Harness) -> None:
    _ramps(service)
    admin = service.connect().semaphore("rmp-cancel", capacity=4)
    _leave_a_plan(admin, 1, 1, 60.0)  # lowering: 4 -> 3, then one a minute
    assert admin.status().capacity == 3
    if backend_class(service.kind).capabilities.has(Capability.DRAIN):
        admin.drain()  # a drain write keeps the plan
        admin.resume()
        assert admin.status().ramp is not None
    admin.set_capacity(5)
    status = admin.status()
    assert status.capacity == 5 and status.ramp is None
    assert not admin.resume_ramp() and not admin.cancel_ramp()
    _leave_a_plan(admin, 9, 1, 60.0)
    assert admin.cancel_ramp()
    status = admin.status()
    assert status.capacity == 6 and status.ramp is None  # kept where it was


def test_bad_ramps_are_refused_before_any_io(service: Harness) -> None:
    _ramps(service)
    sem = service.connect().semaphore("rmp-bad", capacity=1)
    for bad in ((0, 1.0), (-1, 1.0), (1, 0.0), (1, -2.0), (1, float("nan"))):
        with pytest.raises(ValueError):
            sr.Ramp(*bad)
    with pytest.raises(TypeError):
        sem.set_capacity(3, ramp=(1, 1.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sem.set_capacity(0, ramp=sr.Ramp(1, 1.0))
    assert sem.status().capacity == 1 and sem.status().ramp is None
