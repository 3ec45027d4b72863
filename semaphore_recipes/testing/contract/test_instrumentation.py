"""The instrumentation hook, through both faces and every store: the Prometheus metrics
of ``semaphore_recipes.prometheus`` count what happened, read back with
``prometheus_client``'s own parser."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import semaphore_recipes as sr
from semaphore_recipes.instrumentation import AcquireOutcome, Instrumentation
from semaphore_recipes.prometheus import PrometheusMetrics, StatusCollector
from semaphore_recipes.testing.harness import Harness, Verb
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.services import needs

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_grants_timeouts_waits_and_a_lost_permit(service: Harness) -> None:
    needs(service, Verb.EXPIRE_SESSION)
    registry = CollectorRegistry()
    backend = service.connect()
    backend.instrument(PrometheusMetrics(registry))
    registry.register(StatusCollector(backend.status, ["m"], min_interval=0))
    sem = backend.semaphore("m", 2)

    first = sem.acquire(2)
    with pytest.raises(sr.AcquireTimeout):
        sem.acquire(1, timeout=0.05)
    with pytest.raises(sr.WouldBlock):
        sem.acquire(1, blocking=False)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(sem.acquire(1, timeout=30)))
    waiter.start()
    # (waiting as the client counts it, and queued in the store: the enqueue may still be
    # on its way when the client counts the request)
    wait_until(
        lambda: (
            value(scrape(registry), "semaphore_recipes_requests_waiting", semaphore="m") == 1
            and value(scrape(registry), "semaphore_recipes_queue_length", semaphore="m") == 1
        )
    )
    s = scrape(registry)
    assert value(s, "semaphore_recipes_permits_held", semaphore="m") == 2
    assert value(s, "semaphore_recipes_queue_length", semaphore="m") == 1
    assert value(s, "semaphore_recipes_permits_in_use", semaphore="m") == 2
    first.release()
    waiter.join(30)
    assert got, "the waiter was not granted"

    s = scrape(registry)
    counts = {
        o.value: value(s, "semaphore_recipes_acquisitions_total", semaphore="m", outcome=o.value)
        for o in AcquireOutcome
    }
    assert counts == {"granted": 2, "timeout": 1, "would_block": 1, "cancelled": 0, "error": 0}
    assert value(s, "semaphore_recipes_acquire_wait_seconds_count", semaphore="m") == 2
    assert value(s, "semaphore_recipes_requests_waiting", semaphore="m") == 0
    assert value(s, "semaphore_recipes_permits_held", semaphore="m") == 1
    assert value(s, "semaphore_recipes_capacity", semaphore="m") == 2

    permit = got[0]
    service.expire_session(backend)
    assert permit.lost.wait(20)  # type: ignore[attr-defined]
    s = scrape(registry)
    assert value(s, "semaphore_recipes_permits_held", semaphore="m") == 0
    lost = sum(
        value(s, "semaphore_recipes_permits_lost_total", semaphore="m", reason=r)
        for r in ("session", "entry")
    )
    assert lost == 1
    permit.release()  # type: ignore[attr-defined]
    assert value(scrape(registry), "semaphore_recipes_permits_held", semaphore="m") == 0


class Raising(Instrumentation):
    def acquire_started(self, name: str, permits: int) -> None:
        raise RuntimeError("a broken hook")

    def permit_dropped(self, name: str, permits: int, lost: object) -> None:
        raise RuntimeError("a broken hook")


def test_a_hook_that_raises_breaks_neither_acquire_nor_release(service: Harness) -> None:
    backend = service.connect()
    backend.instrument(Raising())
    sem = backend.semaphore("r", 1)
    sem.acquire().release()
    with sem.acquire():
        pass
    assert service.entries("r") == []


def test_instrument_takes_only_an_instrumentation() -> None:
    with sr.connect("memory://instrument-type") as backend, pytest.raises(TypeError):
        backend.instrument(object())  # type: ignore[arg-type]
