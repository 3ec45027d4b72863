"""Several semaphores at once (issue 16): the multi-acquire protocol in the model.

Clients take random subsets of several semaphores in one atomic create; single acquirers
of each semaphore mix with them. Every run must complete (no deadlock), no queue admits
more than its capacity, every admission respects the prefix rule (FIFO) in its queue,
and no waiter sleeps while admissible in a queue. Creating the entries one by one
instead deadlocks: the model finds it.
"""

from __future__ import annotations

import itertools
import os
import random

import pytest

from semaphore_recipes._core import queue as core_queue

from .simulation import Deadlock, Simulation

RUNS = int(os.environ.get("SR_SIMULATION_RUNS", "1500"))


def _small_cases() -> list[tuple[int, list[dict[str, int]]]]:
    """Every request of 3 clients over 2 semaphores with weights 1-2 (each client asks a
    non-empty subset; at least one asks both), under capacity 1 or 2 (weights capped by
    it): the capacity, then the clients' requests."""
    one_client = [
        {name: w for name, w in zip(names, ws, strict=True)}
        for names in (("q0",), ("q1",), ("q0", "q1"))
        for ws in itertools.product((1, 2), repeat=len(names))
    ]
    cases = []
    for capacity in (1, 2):
        fitting = [r for r in one_client if max(r.values()) <= capacity]
        for requests in itertools.product(fitting, repeat=3):
            if any(len(r) == 2 for r in requests):
                cases.append((capacity, list(requests)))
    return cases


SMALL = _small_cases()


@pytest.mark.parametrize(
    ("persistent_watches", "server_admission"),
    [(False, False), (True, False), (False, True)],
    ids=["one-shot", "persistent", "store-decides"],
)
def test_every_small_case_completes_within_capacity(
    persistent_watches: bool, server_admission: bool
) -> None:
    """Each of the small cases, under many random schedules with session losses,
    crashes and timeouts: the checks of the model (no over-admission per queue, the
    prefix rule, no lost wake-up, every run completes) hold in all of them."""
    schedules = max(4, RUNS // 100)
    admissions = 0
    for n, (capacity, requests) in enumerate(SMALL):
        for s in range(schedules):
            sim = Simulation(
                random.Random(n * 1000 + s),
                clients=3,
                capacity=capacity,
                max_weight=2,
                capacity_changes=False,
                queues=2,
                weights=requests,
                persistent_watches=persistent_watches,
                server_admission=server_admission,
            )
            sim.run()
            admissions += sim.admissions
    assert len(SMALL) > 100
    # most clients are granted (the others timed out or crashed while waiting)
    assert admissions > len(SMALL) * schedules * 2


def run_multi(seed: int, **kwargs: object) -> Simulation:
    rng = random.Random(seed)
    sim = Simulation(
        rng,
        clients=rng.randint(2, 7),
        capacity=rng.randint(1, 3),
        max_weight=2,
        capacity_changes=rng.random() < 0.5,
        queues=rng.randint(2, 3),
        **kwargs,  # type: ignore[arg-type]
    )
    sim.run(max_steps=600)
    return sim


@pytest.mark.parametrize("persistent_watches", [False, True], ids=["one-shot", "persistent"])
@pytest.mark.parametrize("keep", [64, 2], ids=["keep-64", "keep-2"])
def test_random_long_runs_with_session_loss_and_capacity_changes(
    persistent_watches: bool, keep: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core_queue, "MAX_MARK_KEYS", keep)
    admissions = multi_admissions = 0
    for seed in range(RUNS):
        sim = run_multi(seed, persistent_watches=persistent_watches)
        admissions += sim.admissions
        multi_admissions += sum(c.multi for c in sim.clients)
    assert admissions > RUNS
    assert multi_admissions > RUNS  # the runs do go through multi-acquires


def test_random_long_runs_where_the_store_decides_admission() -> None:
    """Each queue's store admits the request when it fits there (its entry then holds
    that semaphore while the request waits in the others) and tells it StoreAdmitted;
    granted once every queue did: no deadlock, no over-admission, no lost wake-up."""
    admissions = multi_admissions = told = 0
    runs = 4 * RUNS
    for seed in range(runs):
        sim = run_multi(seed, server_admission=True)
        admissions += sim.admissions
        multi_admissions += sum(c.multi for c in sim.clients)
        told += sim.admissions_told
        assert not any(c.relists for c in sim.clients)
    assert admissions > runs
    assert multi_admissions > runs  # the runs do go through multi-acquires
    assert told > runs  # and through admissions told after the create


def find_deadlock(**kwargs: object) -> str | None:
    for seed in range(3000):
        rng = random.Random(seed)
        sim = Simulation(
            rng,
            clients=rng.randint(2, 4),
            capacity=1,
            max_weight=1,
            capacity_changes=False,
            queues=2,
            timeouts=False,
            **kwargs,  # type: ignore[arg-type]
        )
        try:
            sim.run()
        except Deadlock as exc:
            return str(exc)
    return None


def test_entries_created_one_by_one_deadlock() -> None:
    """The mutation: each entry of a request in a request of its own. Two requests
    interleave their creates (A in x, B in x and y, A in y): A is admitted in x and
    waits behind B in y, B is admitted in y and waits behind A in x."""
    assert find_deadlock(atomic_create=True) is None
    assert find_deadlock(atomic_create=False) is not None


def test_entries_created_one_by_one_deadlock_where_the_store_decides() -> None:
    """The same mutation under a store that admits by itself, queue by queue."""
    assert find_deadlock(atomic_create=True, server_admission=True) is None
    assert find_deadlock(atomic_create=False, server_admission=True) is not None


def test_a_request_admitted_in_one_queue_marks_itself_when_its_capacity_drops() -> None:
    """P is admitted in q0 at once (no mark needed) and waits in q1. q0's capacity drops
    3 -> 2: a newcomer N now takes P for not admitted and watches only P. When X, before
    P, leaves, N is admissible: only P's mark (written on the capacity event, as a
    holder's process does on a decrease) wakes it."""
    sim = Simulation(
        random.Random(0),
        clients=4,
        capacity=3,
        max_weight=2,
        capacity_changes=False,
        queues=2,
        weights=[{"q0": 2}, {"q1": 1}, {"q0": 1, "q1": 1}, {"q0": 1}],
    )
    sim.capacities["q1"] = 1
    x, h, p, n = sim.clients
    for c in (x, h, p):
        sim.do("start", c)
        sim.drain()
    assert (x.state, h.state, p.state) == ("holding", "holding", "waiting")
    assert p.admitted == {"q0"} and "q0" in p.unmarked
    sim.set_capacity("q0", 2)
    sim.drain()
    sim.do("start", n)
    sim.drain()
    sim.do("release", x)
    sim.drain()  # raises LostWakeup if N sleeps though admissible
    assert n.state == "holding"


@pytest.mark.parametrize("server_admission", [False, True], ids=["client", "store"])
def test_a_drained_queue_refuses_the_whole_request_and_leaks_no_entry(
    server_admission: bool,
) -> None:
    """A request waiting in a queue that drains is told and leaves every queue (its
    entries there too, admitted or not); nobody waits in a draining queue once nothing
    is in flight, and after a resume every run completes with no entry left."""
    refused = 0
    for seed in range(RUNS // 2):
        refused += run_multi(seed, drains=True, server_admission=server_admission).refused
    assert refused > RUNS // 4
