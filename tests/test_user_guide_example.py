"""The user guide's example ("Testing code that uses semaphores"), run as a real test.

Everything between the two marker lines below is shown in docs/user-guide.md, character
for character (its ``doc-test: shown-by`` directive there makes tests/test_docs_code.py
fail when the two drift apart).
"""

# --- user guide example: start
import threading
from collections.abc import Callable
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.zookeeper_server import expire_session


def run_nightly_report(backend: Any, build: Callable[[sr.Permit], None]) -> bool:
    """The code under test: build the nightly report, unless a run is already going on
    somewhere (then return False at once)."""
    sem = backend.semaphore("nightly-report", capacity=1)
    try:
        permit = sem.acquire(blocking=False)
    except sr.WouldBlock:
        return False
    with permit:
        build(permit)
    return True


@pytest.fixture(params=["zookeeper_backend", "etcd_backend"])
def connect(request: pytest.FixtureRequest) -> Any:
    """The same test on both services: ``connect()`` opens a backend (a session)."""
    return request.getfixturevalue(request.param)


def test_the_nightly_report_never_runs_twice_at_once(connect: Callable[..., Any]) -> None:
    machine_a, machine_b = connect(), connect()  # two sessions, as on two machines
    building, finish = threading.Event(), threading.Event()

    def slow_build(permit: sr.Permit) -> None:
        building.set()
        assert finish.wait(30)

    first_run = threading.Thread(target=run_nightly_report, args=(machine_a, slow_build))
    first_run.start()
    assert building.wait(30)
    assert run_nightly_report(machine_b, lambda permit: None) is False  # skipped
    finish.set()
    first_run.join(30)
    assert run_nightly_report(machine_b, lambda permit: None) is True  # its turn now


def test_a_run_whose_session_expires_makes_way(zookeeper_backend: Callable[..., Any]) -> None:
    machine_a, machine_b = zookeeper_backend(), zookeeper_backend()
    noticed = []

    def build_through_an_expiry(permit: sr.Permit) -> None:
        expire_session(machine_a.client)  # the server expires machine A's session
        noticed.append(permit.lost.wait(10))

    assert run_nightly_report(machine_a, build_through_an_expiry) is True
    assert noticed == [True]  # the build was told its permit is gone
    assert run_nightly_report(machine_b, lambda permit: None) is True


# --- user guide example: end
