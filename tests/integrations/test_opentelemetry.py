"""OpenTelemetry spans of acquires and lost permits, on the test Redis server, read back
with the SDK's in-memory exporter: one acquire span per acquire call of either face,
with what happened; a lost permit's span and event; a revoke request's (memory store)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import semaphore_recipes as sr
from semaphore_recipes import aio
from semaphore_recipes.integrations.opentelemetry import (
    ACQUIRE_SPAN,
    LOST_EVENT,
    LOST_SPAN,
    REVOKED_EVENT,
    REVOKED_SPAN,
    OpenTelemetryTracing,
)
from semaphore_recipes.testing.redis_harness import RedisHarness


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    yield exported
    exported.shutdown()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> OpenTelemetryTracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryTracing(provider)


def _acquires(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == ACQUIRE_SPAN]


def _outcome(span: ReadableSpan) -> tuple[object, ...]:
    attributes = span.attributes or {}
    return tuple(
        attributes.get(key)
        for key in ("semaphore.name", "semaphore.permits", "semaphore.outcome", "semaphore.token")
    )


def test_one_span_per_acquire_with_its_outcome_token_and_wait(
    redis_harness: RedisHarness, tracing: OpenTelemetryTracing, exporter: InMemorySpanExporter
) -> None:
    backend = redis_harness.connect()
    backend.instrument(tracing)
    sem = backend.semaphore("traced", 3)
    request = tracing.tracer.start_span("request")
    with trace.use_span(request, end_on_exit=True):
        first = sem.acquire(2)
        second = sem.acquire(1, timeout=5)
        with pytest.raises(sr.AcquireTimeout):
            sem.acquire(1, timeout=0.3)
        with pytest.raises(sr.WouldBlock):
            sem.acquire(1, blocking=False)
    first.release()
    second.release()

    spans = _acquires(exporter)
    assert [_outcome(s) for s in spans] == [
        ("traced", 2, "granted", first.token),
        ("traced", 1, "granted", second.token),
        ("traced", 1, "timeout", None),
        ("traced", 1, "would_block", None),
    ]
    assert all(
        s.parent is not None and s.parent.span_id == request.get_span_context().span_id
        for s in spans
    )
    timed_out = spans[2]
    assert timed_out.start_time is not None and timed_out.end_time is not None
    assert 0.25 <= (timed_out.end_time - timed_out.start_time) / 1e9 <= 1.5
    attributes = timed_out.attributes or {}
    assert 0.25 <= float(attributes["semaphore.wait_seconds"]) <= 1.5  # type: ignore[arg-type]


def test_the_asyncio_face_spans_every_acquire_cancelled_ones_too(
    redis_url: str, tracing: OpenTelemetryTracing, exporter: InMemorySpanExporter
) -> None:
    async def main() -> list[int]:
        async with aio.connect(redis_url) as backend:
            backend.instrument(tracing)
            sem = backend.semaphore("traced-aio", 2)
            tokens = []
            for _ in range(5):
                async with sem.acquire(2) as permit:
                    tokens.append(permit.token)
            async with sem.acquire(2) as holder:
                tokens.append(holder.token)
                waiting = asyncio.create_task(sem.acquire(1))
                while not (await sem.status()).waiters:
                    await asyncio.sleep(0.01)
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
            return tokens

    tokens = asyncio.run(main())
    outcomes = [_outcome(s) for s in _acquires(exporter)]
    granted = [("traced-aio", 2, "granted", token) for token in tokens]
    assert outcomes == [*granted, ("traced-aio", 1, "cancelled", None)]
    assert len(outcomes) == 7  # one for one with the acquire calls


def test_a_lost_permit_is_a_span_with_its_event(
    redis_harness: RedisHarness, tracing: OpenTelemetryTracing, exporter: InMemorySpanExporter
) -> None:
    backend = redis_harness.connect()
    backend.instrument(tracing)
    permit = backend.semaphore("traced-lost", 1).acquire()
    redis_harness.expire_session(backend)
    assert permit.lost.wait(20)
    permit.release()
    lost = [s for s in exporter.get_finished_spans() if s.name == LOST_SPAN]
    assert len(lost) == 1
    (event,) = lost[0].events
    assert event.name == LOST_EVENT
    assert dict(event.attributes or {}) == {
        "semaphore.name": "traced-lost",
        "semaphore.permits": 1,
        "semaphore.lost_reason": "session",
    }


def test_a_revoke_request_is_a_span_with_its_event(
    tracing: OpenTelemetryTracing, exporter: InMemorySpanExporter
) -> None:
    from prometheus_client import CollectorRegistry

    from semaphore_recipes.prometheus import PrometheusMetrics

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    with (
        sr.connect("memory://otel-revoke") as holder_side,
        sr.connect("memory://otel-revoke") as admin,
    ):
        holder_side.instrument(tracing)
        sem = holder_side.semaphore("traced-revoke", 2)
        kept = sem.acquire(watch_entry=True)
        asked = sem.acquire(watch_entry=True)
        assert admin.semaphore("traced-revoke", 2).revoke(token=asked.token).asked == 1
        assert asked.revoke_requested.wait(5)
        revoked = [s for s in exporter.get_finished_spans() if s.name == REVOKED_SPAN]
        assert len(revoked) == 1
        assert [e.name for e in revoked[0].events] == [REVOKED_EVENT]
        assert (revoked[0].attributes or {}).get("semaphore.name") == "traced-revoke"
        holder_side.instrument(metrics)
        asked.release()
        again = sem.acquire(watch_entry=True, timeout=5)
        admin.semaphore("traced-revoke", 2).revoke(all=True)
        assert again.revoke_requested.wait(5) and kept.revoke_requested.wait(5)
        counted = registry.get_sample_value(
            "semaphore_recipes_permits_revoked_total", {"semaphore": "traced-revoke"}
        )
        assert counted == 1  # (kept was held before the metrics were attached)
        kept.release()
        again.release()
