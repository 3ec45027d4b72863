"""OpenTelemetry traces of acquires and lost permits (the ``[opentelemetry]`` extra:
``opentelemetry-api`` only; the application installs and configures the SDK).

:class:`OpenTelemetryTracing` is an :class:`~semaphore_recipes.instrumentation.Instrumentation`
for ``backend.instrument(...)`` (either face):

* one span ``semaphore.acquire`` per acquire call, from the call to its end (granted or
  not), a child of the span current in the calling thread or task, with the attributes
  ``semaphore.name``, ``semaphore.permits``, ``semaphore.outcome`` (granted, timeout,
  would_block, cancelled, error), ``semaphore.wait_seconds`` and, when granted,
  ``semaphore.token`` (the fencing token); status ERROR for the ``error`` outcome;
* one span ``semaphore.permit_lost`` per permit lost while held, with the event
  ``semaphore.permit.lost`` (``semaphore.lost_reason``: ``session`` when the session or
  lease ended, ``entry`` when the entry was deleted from outside: by hand, by a forced
  ``revoke``, or on etcd a lease revoked). Losses are seen by the
  backend's own threads, where no span is current, so this span is a root;
* one span ``semaphore.permit_revoked`` per permit held here whose holder was asked to
  give it back (``Semaphore.revoke``), with the event ``semaphore.permit.revoked``; a
  root too (seen by the watch of the holder's entry). A forced revoke that then removes
  the entry adds a ``semaphore.permit_lost`` span with ``lost_reason`` ``entry``.

The acquire span is made when the acquire ends, with its start time set back by the
wait (the hooks of one acquire are not paired by an object of their own); so spans that
the store's client makes during the wait are its siblings, not its children. Nothing
here blocks or raises into an acquire: the hooks' errors are logged and dropped.
"""

from __future__ import annotations

import time

try:
    from opentelemetry import trace
except ImportError as exc:  # pragma: no cover (the extra is in the test dependencies)
    from ..errors import BackendNotInstalled

    raise BackendNotInstalled("OpenTelemetry", "opentelemetry", "opentelemetry-api") from exc

from ..instrumentation import AcquireOutcome, Instrumentation, LostReason

__all__ = [
    "ACQUIRE_SPAN",
    "LOST_EVENT",
    "LOST_SPAN",
    "REVOKED_EVENT",
    "REVOKED_SPAN",
    "OpenTelemetryTracing",
]

ACQUIRE_SPAN = "semaphore.acquire"
LOST_SPAN = "semaphore.permit_lost"
LOST_EVENT = "semaphore.permit.lost"
REVOKED_SPAN = "semaphore.permit_revoked"
REVOKED_EVENT = "semaphore.permit.revoked"
_SCOPE = "semaphore_recipes"


class OpenTelemetryTracing(Instrumentation):
    """Spans of this process's acquires and lost permits (see the module docstring),
    through ``tracer_provider`` (default: the global one, set by the SDK's setup)."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)

    def acquire_ended(
        self, name: str, permits: int, outcome: AcquireOutcome, seconds: float
    ) -> None:
        if outcome is not AcquireOutcome.GRANTED:  # a grant's span waits for its token
            self._acquire_span(name, permits, outcome, seconds, None)

    def acquire_granted(self, name: str, permits: int, token: int, seconds: float) -> None:
        self._acquire_span(name, permits, AcquireOutcome.GRANTED, seconds, token)

    def permit_dropped(self, name: str, permits: int, lost: LostReason | None) -> None:
        if lost is None:
            return
        attributes: dict[str, str | int] = {
            "semaphore.name": name,
            "semaphore.permits": permits,
            "semaphore.lost_reason": lost.value,
        }
        with self.tracer.start_as_current_span(LOST_SPAN, attributes=attributes) as span:
            span.add_event(LOST_EVENT, attributes)

    def permit_revoked(self, name: str, permits: int) -> None:
        attributes: dict[str, str | int] = {"semaphore.name": name, "semaphore.permits": permits}
        with self.tracer.start_as_current_span(REVOKED_SPAN, attributes=attributes) as span:
            span.add_event(REVOKED_EVENT, attributes)

    def _acquire_span(
        self,
        name: str,
        permits: int,
        outcome: AcquireOutcome,
        seconds: float,
        token: int | None,
    ) -> None:
        end = time.time_ns()
        waited = max(0.0, seconds)
        span = self.tracer.start_span(
            ACQUIRE_SPAN,
            start_time=end - int(waited * 1e9),
            attributes={
                "semaphore.name": name,
                "semaphore.permits": permits,
                "semaphore.outcome": outcome.value,
                "semaphore.wait_seconds": waited,
            },
        )
        if token is not None:
            span.set_attribute("semaphore.token", token)
        if outcome is AcquireOutcome.ERROR:
            span.set_status(trace.StatusCode.ERROR)
        span.end(end_time=end)
