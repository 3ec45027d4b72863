"""Bounds on every call (every backend): nothing waits forever when the service is cut
off, ``acquire(timeout=0)`` tries exactly once, and capacity and permits have one
documented maximum."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness, Verb
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.proxy import FaultProxy
from semaphore_recipes.testing.services import needs

REQUEST_TIMEOUT = 2.0
SESSION_TIMEOUT = 10  # longer than the calls made while cut off take
# a loaded machine (2 cores shared with other test runs) may start the call late
MARGIN = 3.0


def call_with_a_bound(call: Callable[[], Any], limit: float) -> tuple[float, Any]:
    """Run ``call`` in a thread; return (seconds taken, its result or exception), or
    (``limit``, "still running") if it has not returned after ``limit`` seconds (it is
    left to finish)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    start = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        return limit, "still running"
    return time.monotonic() - start, outcome[0]


@pytest.fixture
def proxy(service: Harness) -> Iterator[FaultProxy]:
    needs(service, Verb.CUT)
    upstream = service.url.split("//", 1)[1].split("/", 1)[0].rpartition("@")[2]
    with FaultProxy(upstream) as p:
        yield p


def _proxied_backend(service: Harness, proxy: FaultProxy, **params: object) -> Any:
    netloc, path = service.url.split("//", 1)[1].split("/", 1)
    path, _, harness_query = path.partition("?")
    user = netloc.rpartition("@")[0]  # (mysql://root@host/db: the user is kept)
    # (the harness's own parameters kept: a schema, a user; those given replace them)
    merged = dict(parse_qsl(harness_query)) | {k: str(v) for k, v in params.items()}
    query = "&".join(f"{k}={v}" for k, v in merged.items())
    path = "/" + path
    at = f"{user}@" if user else ""
    return service.connect(url=f"{service.kind}://{at}{proxy.address}{path}?{query}")


@pytest.mark.parametrize("fault", ["blackhole", "cut"])
def test_every_call_is_bounded_by_request_timeout_while_cut_off(
    service: Harness, proxy: FaultProxy, fault: str
) -> None:
    backend = _proxied_backend(
        service, proxy, session_timeout=SESSION_TIMEOUT, request_timeout=REQUEST_TIMEOUT
    )
    sem = backend.semaphore("bounded", capacity=2)
    held = sem.acquire(timeout=10)
    fenced = sem.acquire(timeout=10)
    getattr(proxy, fault)()
    bound = REQUEST_TIMEOUT + MARGIN

    def commit() -> Any:
        tx = fenced.transaction()
        tx.create(backend.data_key("bounded", f"sr-fenced-{time.monotonic_ns()}"), b"x")
        return tx.commit()

    calls: list[tuple[str, Callable[[], Any]]] = [
        ("semaphore()", lambda: backend.semaphore("opened-while-cut", capacity=1)),
        ("status()", sem.status),
        ("set_capacity()", lambda: sem.set_capacity(3)),
        ("transaction().commit()", commit),
    ]
    # at once, each in its own thread (as a service's threads would call): each is bounded
    outcomes: dict[str, tuple[float, Any]] = {}
    threads = [
        threading.Thread(
            target=lambda n=name, c=call: outcomes.__setitem__(n, call_with_a_bound(c, bound + 10))
        )
        for name, call in calls
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    problems = []
    for name, _ in calls:
        took, outcome = outcomes[name]
        if not isinstance(outcome, sr.BackendUnavailable) or took > bound:
            problems.append(f"{name}: {outcome!r} after {took:.1f} s")
    took, outcome = call_with_a_bound(held.release, limit=bound + 10)
    if outcome is not None or took > bound or held.state is not sr.PermitState.RELEASED:
        problems.append(f"release(): {outcome!r} after {took:.1f} s, {held.state}")
    took, outcome = call_with_a_bound(backend.close, limit=bound + 10)
    if outcome is not None or took > bound:
        problems.append(f"close(): {outcome!r} after {took:.1f} s")
    assert not problems, f"request_timeout={REQUEST_TIMEOUT}: {problems}"
    proxy.restore()
    # closed while cut off: the entries go with the session (ZooKeeper: its close may
    # not have arrived; etcd: the lease could not be revoked and expires)
    wait_until(lambda: service.entries() == [], timeout=SESSION_TIMEOUT + MARGIN + 5)


@pytest.mark.parametrize("timeout", [0, 0.001])
def test_timeout_zero_on_a_free_semaphore_is_granted_every_time(
    service: Harness, timeout: float
) -> None:
    sem = service.connect().semaphore("zero-free", capacity=2)
    for _ in range(50):
        sem.acquire(timeout=timeout).release()
    with sem.acquire(permits=1):  # one held: one still free
        for _ in range(10):
            sem.acquire(timeout=timeout).release()
    assert service.entries() == []


@pytest.mark.parametrize("timeout", [0, 0.001])
def test_timeout_zero_on_a_full_semaphore_times_out_and_leaves_no_entry(
    service: Harness, timeout: float
) -> None:
    sem = service.connect().semaphore("zero-full", capacity=2)
    other = service.connect().semaphore("zero-full", capacity=2)
    with other.acquire(permits=2):
        for _ in range(10):
            with pytest.raises(sr.AcquireTimeout):
                sem.acquire(timeout=timeout)
            assert len(service.entries()) == 1  # only the holder's, at once
    wait_until(lambda: service.entries() == [])


def test_the_largest_capacity_and_permits_work_and_larger_ones_are_refused(
    service: Harness,
) -> None:
    backend = service.connect()
    with pytest.raises(ValueError, match="at most"):
        backend.semaphore("huge", capacity=sr.MAX_CAPACITY + 1)
    sem = backend.semaphore("huge", capacity=sr.MAX_CAPACITY)
    with pytest.raises(ValueError, match="at most"):
        sem.set_capacity(sr.MAX_CAPACITY + 1)
    assert sem.status().capacity == sr.MAX_CAPACITY  # nothing was written
    with sem.acquire(permits=sr.MAX_CAPACITY, timeout=10) as permit:
        holders = sem.status().holders
        assert [h.permits for h in holders] == [sr.MAX_CAPACITY]
        assert holders[0].token == permit.token
        with pytest.raises(sr.AcquireTimeout):
            sem.acquire(timeout=0)
    with pytest.raises(ValueError):
        sem.acquire(permits=sr.MAX_CAPACITY + 1)
    assert service.entries() == []
