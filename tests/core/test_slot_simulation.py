"""Job slots in the simulation: the real protocol generator with ``slots=True``
(docs/design.md section 2, "Job slots")."""

from __future__ import annotations

import pytest

from semaphore_recipes._core.slots import lowest_free

from .simulation import Simulation, SlotViolation
from .test_simulation import run_one as run_sim

RUNS = 1500


def run_one(
    seed: int, *, slot_records_die_later: bool = False, stale_slot_listing: bool = False
) -> Simulation:
    return run_sim(
        seed,
        persistent_watches=seed % 2 == 1,
        slots=True,
        slot_records_die_later=slot_records_die_later,
        stale_slot_listing=stale_slot_listing,
    )


def test_random_runs_hold_distinct_slots_within_range() -> None:
    """Churn, crashes, session losses (also while taking slots), timeouts and capacity
    changes: every grant's slots are its own records, distinct from every holder's,
    below the capacity it was granted under; no record outlives its entry."""
    granted = 0
    for seed in range(RUNS):
        granted += run_one(seed).slots_granted
    assert granted > RUNS  # the runs really take slots


def test_simulation_catches_slot_records_that_outlive_their_entry() -> None:
    """Records deleted by a request of their own after the entry's: an admitted
    newcomer finds the old holder's index still taken and goes past the capacity."""
    for seed in range(RUNS):
        try:
            run_one(seed, slot_records_die_later=True)
        except SlotViolation:
            return
    raise AssertionError("no run went wrong with slot records outliving their entry")


def test_simulation_catches_a_lost_race_without_a_fresh_listing() -> None:
    """After losing an index, choosing from the first listing skips records freed
    since and goes past the capacity (found by the random runs before the fresh
    listing was part of the answer)."""
    for seed in range(RUNS):
        try:
            run_one(seed, stale_slot_listing=True)
        except SlotViolation:
            return
    raise AssertionError("no run went past the capacity choosing from an old listing")


def test_simulation_catches_two_holders_of_one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose slot create overwrites a record (no create-if-absent) gives one
    index to two holders, and the simulation says so."""
    real_do = Simulation.do

    def steal(self: Simulation, action: str, c: object) -> None:
        if action == "take_slot":
            self.slot_records[self.names[0]].clear()  # a store that overwrites
        real_do(self, action, c)  # type: ignore[arg-type]

    monkeypatch.setattr(Simulation, "do", steal)
    for seed in range(RUNS):
        try:
            run_one(seed)
        except SlotViolation:
            return
    raise AssertionError("no run gave one slot to two holders")


def _decided_by_the_store(seed: int, store_mutation: str = "") -> Simulation:
    return run_sim(
        seed,
        slots=True,
        server_admission=True,
        admission_slots=True,
        store_mutation=store_mutation,
    )


def test_slots_given_by_the_admitting_write_are_distinct_within_range() -> None:
    """A store that decides admission and gives the slots in the same write (Redis's
    scripts): no slot step follows the admission (the model fails a run where one
    does), and every slot check holds."""
    granted = 0
    for seed in range(RUNS):
        granted += _decided_by_the_store(seed).slots_granted
    assert granted > RUNS  # the runs really give slots


def test_simulation_catches_slots_given_without_looking_at_the_holders() -> None:
    for seed in range(RUNS):
        try:
            _decided_by_the_store(seed, store_mutation="slots_ignore_holders")
        except SlotViolation:
            return
    raise AssertionError("no run gave a held slot to another")


def test_lowest_free() -> None:
    assert lowest_free(set(), 2) == [0, 1]
    assert lowest_free({0, 2}, 2) == [1, 3]
    assert lowest_free({0, 1, 5}, 1, start=1) == [2]
