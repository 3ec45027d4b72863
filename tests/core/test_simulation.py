"""The protocol, run by many simulated clients against an in-memory store."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semaphore_recipes._core import queue as core_queue
from semaphore_recipes._core.queue import Admitted, Entry, QueuePosition, Wait
from semaphore_recipes._core.slots import Slot

from .simulation import LostWakeup, Simulation

RUNS = int(os.environ.get("SR_SIMULATION_RUNS", "1500"))


def run_one(
    seed: int,
    *,
    mark_held: bool = True,
    persistent_watches: bool = False,
    deleted_views: bool = True,
    older_views: bool = False,
    slots: bool = False,
    slot_records_die_later: bool = False,
    stale_slot_listing: bool = False,
    server_admission: bool = False,
    admission_slots: bool = False,
    store_mutation: str = "",
    drains: bool = False,
    revokes: bool = False,
    relists: str = "whole",
    peeks: bool = False,
    clients: tuple[int, int] = (2, 6),
    capacity: tuple[int, int] = (1, 3),
    max_weight: int = 2,
    capacity_changes: float = 0.5,
    max_steps: int = 400,
) -> Simulation:
    """One random run of ``clients`` and ``capacity`` drawn from those ranges, with
    ``capacity_changes`` the odds that it changes capacities."""
    rng = random.Random(seed)
    sim = Simulation(
        rng,
        clients=rng.randint(*clients),
        capacity=rng.randint(*capacity),
        max_weight=max_weight,
        capacity_changes=rng.random() < capacity_changes,
        mark_held=mark_held,
        persistent_watches=persistent_watches,
        deleted_views=deleted_views,
        older_views=older_views,
        slots=slots,
        slot_records_die_later=slot_records_die_later,
        stale_slot_listing=stale_slot_listing,
        server_admission=server_admission,
        admission_slots=admission_slots,
        store_mutation=store_mutation,
        drains=drains,
        revokes=revokes,
        relists=relists,
        peeks=peeks,
    )
    sim.run(max_steps=max_steps)
    return sim


@pytest.fixture(params=["keep-64", "keep-2"])
def kept_entries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many nearest lower entries a view keeps (and a mark records). The runs have
    a handful of clients: with the real 64 no view is ever truncated, so they also run
    with 2, where most views are (design.md section 2, "Truncated views")."""
    keep = 64 if request.param == "keep-64" else 2
    monkeypatch.setattr(core_queue, "MAX_MARK_KEYS", keep)
    return keep


@pytest.mark.parametrize(
    ("persistent_watches", "peeks"),
    [(False, False), (True, False), (True, True)],
    ids=["one-shot", "persistent", "persistent-peeks"],
)
def test_many_random_runs_keep_safety_liveness_and_no_herd(
    persistent_watches: bool, peeks: bool, kept_entries: int
) -> None:
    """One-shot watches (ZooKeeper), and watches that outlive a held mark whose event
    carries the mark (etcd), there with heads that read before they watch (etcd's
    ``peek_before_arming``)."""
    worst_herd = 0
    admissions = relists = peeked = 0
    for seed in range(RUNS):
        sim = run_one(seed, persistent_watches=persistent_watches, peeks=peeks)
        worst_herd = max(worst_herd, sim.max_woken)
        admissions += sim.admissions
        relists += sum(c.relists for c in sim.clients)
        peeked += sum(c.peeks for c in sim.clients)
    assert admissions > RUNS  # the runs really admit clients
    assert relists > RUNS // 20  # and go through stale views that need a fresh listing
    # Heads read before they watch only with the flag (these runs seldom peek; those
    # of test_heads_that_read_before_they_watch_... do, and count it).
    if not peeks:
        assert peeked == 0
    # One store event wakes a handful of waiters at most, however many wait.
    assert worst_herd <= 3, worst_herd


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32), keep=st.sampled_from([2, 64]))
def test_hypothesis_chosen_runs(seed: int, keep: int) -> None:
    real = core_queue.MAX_MARK_KEYS
    core_queue.MAX_MARK_KEYS = keep
    try:
        run_one(seed)
    finally:
        core_queue.MAX_MARK_KEYS = real


def test_herd_does_not_grow_with_waiters() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        sim = Simulation(rng, clients=40, capacity=2, max_weight=1, capacity_changes=False)
        sim.run(max_steps=3000)
        assert sim.max_woken <= 3, (seed, sim.max_woken)


def test_deleted_views_are_used_and_save_listings() -> None:
    """A deletion that brings the view its entry was admitted with (a waiter of the same
    process, ``QueueDriver.admitted_view``) is used: the same runs list afresh less
    often with it than without (safety and liveness are checked in every run)."""
    relists = {}
    for views in (False, True):
        relists[views] = 0
        for seed in range(RUNS):
            sim = run_one(seed, deleted_views=views)
            relists[views] += sum(c.relists for c in sim.clients)
    assert relists[True] < relists[False], relists


def test_stale_truncated_views_read_their_entries_rather_than_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stale view that a truncation shortened reads its own entries (one round, the
    holders' marks making it whole) before it lists the queue afresh: the same runs
    list less often with it than without, and stay safe and live either way (the
    deleted views of other drivers are off, so predecessors leave before their marks
    are read, as across processes)."""
    monkeypatch.setattr(core_queue, "MAX_MARK_KEYS", 2)  # a handful of clients: keep 2
    relists = {}
    for probing in (False, True):
        if not probing:
            monkeypatch.setattr(core_queue.QueuePosition, "keys_to_probe", lambda self: ())
        else:
            monkeypatch.undo()
            monkeypatch.setattr(core_queue, "MAX_MARK_KEYS", 2)
        relists[probing] = 0
        for seed in range(RUNS):
            sim = run_one(seed, deleted_views=False)
            relists[probing] += sum(c.relists for c in sim.clients)
    assert relists[True] < relists[False], relists


def test_simulation_catches_a_probe_taken_for_a_whole_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading a truncated view's entries says nothing of what the truncation left out:
    a probe that took the view for whole over-admits (or sleeps as a head that does not
    watch every holder)."""
    from .simulation import OverAdmission

    monkeypatch.setattr(core_queue, "MAX_MARK_KEYS", 2)

    def whole(self: core_queue.QueuePosition) -> None:
        self._stale = False
        self.truncated = False

    monkeypatch.setattr(core_queue.QueuePosition, "probed", whole)
    for seed in range(5000):
        rng = random.Random(seed)
        sim = Simulation(
            rng,
            clients=6,
            capacity=rng.randint(1, 2),
            max_weight=2,
            capacity_changes=True,
            deleted_views=False,
        )
        try:
            sim.run()
        except (OverAdmission, LostWakeup):
            return
    raise AssertionError("no run went wrong taking a probed view for whole")


@pytest.mark.parametrize("deleted_views", [True, False], ids=["views", "no-views"])
def test_relists_answered_with_entries_gone_since_keep_safety_and_liveness(
    deleted_views: bool, kept_entries: int
) -> None:
    """ZooKeeper answers a Relist from what its process knows of the queue: a listing
    that holds the waiter's entry, less the entries known gone since
    (``zookeeper/_known_queue.py``), so some entries gone since its create may be in
    the answer. Every run stays safe and live (checked in each), and those answers
    happen."""
    relists = 0
    for seed in range(RUNS):
        sim = run_one(seed, relists="superset", deleted_views=deleted_views)
        relists += sum(c.relists for c in sim.clients)
    assert relists > RUNS // 20


def test_simulation_catches_a_relist_missing_a_live_entry() -> None:
    """The answer to a Relist must hold every live lower entry: one from a record
    listed before the waiter's create (which may lack such an entry) over-admits or
    sleeps, and the simulation finds it."""
    from .simulation import OverAdmission

    for seed in range(3000):
        try:
            run_one(seed, relists="missing")
        except (OverAdmission, LostWakeup):
            return
    raise AssertionError("no run went wrong with a relist missing a live entry")


def test_simulation_catches_a_view_of_another_entry() -> None:
    """The view a deletion brings must be that entry's own: a driver that handed out
    the view of an older entry under the same key (etcd reuses its key slots:
    ``QueueDriver.key_reused``) drops live entries from a successor's view, and the
    simulation finds the run that admits too many or sleeps."""
    from .simulation import OverAdmission

    for seed in range(3000):
        try:
            run_one(seed, older_views=True)
        except (OverAdmission, LostWakeup):
            return
    raise AssertionError("no run went wrong with another entry's view")


def find_lost_wakeup(**kwargs: Any) -> str | None:
    for seed in range(3000):
        try:
            run_one(seed, **kwargs)
        except LostWakeup as exc:
            return str(exc)
    return None


def run_peeking(seed: int) -> Simulation:
    """etcd-like runs where heads have several entries to watch more often (8-12
    clients, capacity 3-4): the random runs above, with capacities of 1-3, seldom
    peek (a run of these peeks about once in three)."""
    return run_one(
        seed,
        persistent_watches=True,
        peeks=True,
        clients=(8, 12),
        capacity=(3, 4),
        max_weight=1,
        capacity_changes=0.3,
        max_steps=3000,
    )


def test_heads_that_read_before_they_watch_keep_safety_liveness_and_no_herd() -> None:
    peeked = admissions = worst_herd = 0
    runs = RUNS // 3
    for seed in range(runs):
        sim = run_peeking(seed)
        peeked += sum(c.peeks for c in sim.clients)
        admissions += sim.admissions
        worst_herd = max(worst_herd, sim.max_woken)
    assert peeked > runs // 10 and admissions > 8 * runs, (peeked, admissions)
    assert worst_herd <= 3, worst_herd


def test_simulation_catches_a_peek_taken_for_a_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A head that counts the entries it only read as watched never arms them: a
    release among them goes untold."""
    real = QueuePosition.read

    def mutant(self: QueuePosition, key: str, state: Any, *, watched: bool) -> None:
        real(self, key, state, watched=True)

    monkeypatch.setattr(QueuePosition, "read", mutant)
    for seed in range(2000):
        try:
            run_peeking(seed)
        except LostWakeup:
            return
    pytest.fail("no lost wake-up found")


def test_simulation_catches_a_missing_held_mark() -> None:
    assert find_lost_wakeup(mark_held=False) is not None


def test_simulation_catches_a_head_that_watches_only_its_predecessor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = core_queue.decide

    def mutant(lower: tuple[Entry, ...], weight: int, capacity: int) -> Admitted | Wait:
        d = real(lower, weight, capacity)
        if isinstance(d, Wait) and d.head and d.watch:
            return Wait(watch=d.watch[-1:], head=True)
        return d

    monkeypatch.setattr(core_queue, "decide", mutant)
    assert find_lost_wakeup() is not None


def _drop_capacity_under_unmarked_holders(mark_on_decrease: bool) -> None:
    """Three holders admitted one after another (no mark needed), then the capacity
    drops 3 -> 2 and a newcomer takes the third holder for not admitted."""
    sim = Simulation(random.Random(0), clients=4, capacity=3, max_weight=1, capacity_changes=False)
    a, b, me, newcomer = sim.clients
    for c in (a, b, me):
        sim.do("start", c)
        sim.drain()
    assert [c.state for c in (a, b, me)] == ["holding"] * 3
    assert all(c.unmarked for c in (a, b, me))  # the uncontended path wrote no mark
    sim.capacity = 2
    sim.decreased.add(sim.names[0])
    if mark_on_decrease:  # what each holder's process does when it sees the drop
        for c in (a, b, me):
            c.mark_pending.update(c.unmarked)
            c.unmarked.clear()
    sim.drain()
    sim.do("start", newcomer)
    sim.drain()
    sim.do("release", a)
    sim.drain()
    sim.do("release", b)
    sim.drain()  # raises LostWakeup if the newcomer sleeps though admissible
    assert newcomer.state == "holding"


def test_unmarked_holders_mark_themselves_when_the_capacity_drops() -> None:
    _drop_capacity_under_unmarked_holders(mark_on_decrease=True)
    with pytest.raises(LostWakeup):
        _drop_capacity_under_unmarked_holders(mark_on_decrease=False)


def test_simulation_catches_ignoring_entries_already_behind_us(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from semaphore_recipes._core import protocol

    real_init = protocol.Enqueued.__init__

    def never_later(
        self: protocol.Enqueued,
        me: Entry,
        lower: tuple[Entry, ...],
        capacity: int,
        later_entries: bool,
        capacity_version: int,
        lower_complete: bool = True,
        admitted: bool = False,
        slots: tuple[Slot, ...] | None = None,
        draining: bool = False,
    ) -> None:
        real_init(
            self,
            me,
            lower,
            capacity,
            False,
            capacity_version,
            lower_complete,
            admitted,
            slots,
            draining,
        )

    monkeypatch.setattr(protocol.Enqueued, "__init__", never_later)
    assert find_lost_wakeup() is not None


def test_simulation_catches_a_mark_event_that_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    from semaphore_recipes._core import protocol

    real = protocol.apply_event

    def mutant(position: core_queue.QueuePosition, event: protocol.Event) -> None:
        if not isinstance(event, protocol.EntryMarked):
            real(position, event)

    monkeypatch.setattr(protocol, "apply_event", mutant)
    for seed in range(3000):
        try:
            # (a deletion that brings the view makes up for a missed mark: another process)
            run_one(seed, persistent_watches=True, deleted_views=False)
        except LostWakeup:
            return
    raise AssertionError("no lost wake-up found")


def test_simulation_catches_a_stale_capacity_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """A capacity event older than what the waiter knows (posted during its enqueue, or
    overtaken by a newer post) must not be applied: found by the fault campaign
    (ZooKeeper storm, seed 823), where a waiter admitted itself on a capacity of 6
    while 5 was stored. With the version check removed the simulation over-admits."""
    from .simulation import OverAdmission

    def apply_any(self: core_queue.QueuePosition, capacity: int, version: int) -> None:
        self.capacity = capacity

    monkeypatch.setattr(core_queue.QueuePosition, "set_capacity", apply_any)
    for seed in range(RUNS):
        rng = random.Random(seed)
        sim = Simulation(rng, clients=6, capacity=3, max_weight=2, capacity_changes=True)
        try:
            sim.run()
        except OverAdmission:
            return
    raise AssertionError("no run over-admitted on stale capacity events")


def test_simulation_catches_admitting_from_a_truncated_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A waiter keeps only its nearest lower entries (those whose weights pass the
    capacity), so 10,000 waiters do not each hold and sum the whole queue. Such a view
    is no superset of the lower entries: deciding from it without a fresh listing
    over-admits (or sleeps as a head that does not watch every holder)."""
    from .simulation import OverAdmission

    monkeypatch.setattr(core_queue, "MAX_MARK_KEYS", 2)  # a handful of clients: keep 2
    truncations = 0
    real_keep = core_queue.QueuePosition._keep_nearest

    def counting(self: core_queue.QueuePosition, ordered: list[Entry]) -> None:
        nonlocal truncations
        real_keep(self, ordered)
        truncations += self.truncated

    monkeypatch.setattr(core_queue.QueuePosition, "_keep_nearest", counting)
    for seed in range(200):
        run_one(seed)
    assert truncations > 10  # the random runs do go through truncated views

    monkeypatch.setattr(core_queue.QueuePosition, "stale", property(lambda self: self._stale))
    for seed in range(5000):
        rng = random.Random(seed)
        sim = Simulation(
            rng, clients=6, capacity=rng.randint(1, 2), max_weight=2, capacity_changes=True
        )
        try:
            sim.run()
        except (OverAdmission, LostWakeup):
            return
    raise AssertionError("no run went wrong deciding from a truncated view")


# ---- a store whose writes decide admission (server_admission: Redis's scripts) ----------


def test_a_store_that_decides_admission_keeps_safety_liveness_and_no_herd() -> None:
    """The store admits at every change and tells each admitted waiter (StoreAdmitted),
    but the creator, whose create's answer says it: the protocol never arms nor relists
    (the model fails a run that does), a client takes itself for admitted only once the
    store admitted it, and every check of the model holds. A change wakes only the
    waiters it admits: at most the capacity (1-4) of them."""
    worst_herd = admissions = told = 0
    runs = 6 * RUNS
    for seed in range(runs):
        sim = run_one(seed, server_admission=True)
        worst_herd = max(worst_herd, sim.max_woken)
        admissions += sim.admissions
        told += sim.admissions_told
        assert not any(c.relists for c in sim.clients)
    assert admissions > runs  # the runs really admit clients
    assert runs < told < admissions  # admitted by a create's answer, and by a later change
    assert worst_herd <= 4, worst_herd


def test_a_store_that_decides_admission_wakes_one_waiter_per_release() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        sim = Simulation(
            rng, clients=40, capacity=2, max_weight=1, capacity_changes=False, server_admission=True
        )
        sim.run(max_steps=3000)
        assert sim.max_woken <= 1, (seed, sim.max_woken)


def test_simulation_catches_a_store_that_admits_without_telling() -> None:
    with pytest.raises(LostWakeup):
        for seed in range(3000):
            run_one(seed, server_admission=True, store_mutation="untold")


def test_simulation_catches_a_store_that_forgets_its_holders() -> None:
    from .simulation import OverAdmission

    with pytest.raises(OverAdmission):
        for seed in range(3000):
            run_one(seed, server_admission=True, store_mutation="forget_holders")


def test_simulation_catches_an_empty_answer_taken_for_an_admission(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An answer listing nothing before us is no admission where the store decides: an
    entry heavier than a capacity lowered meanwhile waits at the head, with nothing
    before it (``Enqueued.admitted`` says it, not an empty ``lower``)."""
    from semaphore_recipes._core import protocol

    from .simulation import OverAdmission

    real_init = protocol.Enqueued.__init__

    def empty_is_admitted(
        self: protocol.Enqueued,
        me: Entry,
        lower: tuple[Entry, ...],
        capacity: int,
        later_entries: bool,
        capacity_version: int,
        lower_complete: bool = True,
        admitted: bool = False,
        slots: tuple[Slot, ...] | None = None,
        draining: bool = False,
    ) -> None:
        real_init(
            self,
            me,
            lower,
            capacity,
            later_entries,
            capacity_version,
            lower_complete,
            not lower,
            slots,
            draining,
        )

    monkeypatch.setattr(protocol.Enqueued, "__init__", empty_is_admitted)
    with pytest.raises(OverAdmission, match="not by the store"):
        for seed in range(3000):
            run_one(seed, server_admission=True)


# ---- draining: the flag beside the capacity, told as a capacity change is --------------


@pytest.mark.parametrize("server_admission", [False, True], ids=["client", "store"])
def test_draining_refuses_and_tells_every_waiter_and_leaks_no_entry(
    server_admission: bool,
) -> None:
    """Drains set and cleared at random among creates, releases, crashes, session
    losses and capacity changes (events reordered): once nothing is in flight nobody
    waits in a draining queue, the usual checks hold, and after a resume every run
    completes with no entry left behind."""
    refused = admissions = 0
    for seed in range(RUNS // 2):
        sim = run_one(seed, drains=True, server_admission=server_admission)
        refused += sim.refused
        admissions += sim.admissions
    assert refused > RUNS // 4  # the runs do go through refusals
    assert admissions > RUNS // 2


def test_simulation_catches_a_waiter_deaf_to_a_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    """A protocol that ignores the drain flag of a capacity event leaves a waiter
    sleeping in a draining queue: the simulation finds it."""
    from semaphore_recipes._core import protocol

    monkeypatch.setattr(protocol, "told_to_drain", lambda event, version: False)
    for seed in range(RUNS):
        try:
            run_one(seed, drains=True)
        except LostWakeup:
            return
    raise AssertionError("no run kept a waiter in a draining queue")


# ---- forced revokes: one holder's entries removed while it still runs ------------------


@pytest.mark.parametrize(
    ("server_admission", "persistent_watches"),
    [(False, False), (False, True), (True, False)],
    ids=["one-shot", "persistent", "store"],
)
def test_revokes_admit_the_next_waiters_and_leak_no_entry(
    server_admission: bool, persistent_watches: bool
) -> None:
    """Revoke requests written on entries (holders', and waiters' as a stale status
    read would pick them), which their watchers see as a write, and holders' entries
    removed by an operator (a forced revoke), among creates, releases, crashes, session
    losses, drains and capacity changes: the prefix rule holds with the removed holders
    no longer counted, no waiter sleeps while admissible, and every run completes with
    no entry left behind."""
    revoked = admissions = 0
    for seed in range(RUNS // 2):
        sim = run_one(
            seed,
            revokes=True,
            drains=seed % 3 == 0,
            server_admission=server_admission,
            persistent_watches=persistent_watches,
        )
        revoked += sim.revoked
        admissions += sim.admissions
    assert revoked > RUNS // 4  # the runs do go through forced revokes
    assert admissions > RUNS // 2
