"""Prometheus metrics for semaphores (the ``[metrics]`` extra: ``prometheus_client``).

Two collectors:

* :class:`PrometheusMetrics`, an :class:`~semaphore_recipes.instrumentation.Instrumentation`
  for ``backend.instrument(...)``: what this process does, per semaphore name::

      semaphore_recipes_acquisitions_total{semaphore, outcome}    granted, timeout, would_block,
                                                                  cancelled, error
      semaphore_recipes_acquire_wait_seconds{semaphore}           histogram, request to grant
      semaphore_recipes_permits_held{semaphore}                   permits held in this process
      semaphore_recipes_requests_waiting{semaphore}               acquires waiting in this process
      semaphore_recipes_permits_lost_total{semaphore, reason}     session|entry
      semaphore_recipes_permits_revoked_total{semaphore}          revoke requests seen
      semaphore_recipes_session_state{backend, state}             1 for the current state

* :class:`StatusCollector`: the store-wide view of a list of semaphores, read with
  ``status()`` when scraped, at most once per ``min_interval`` seconds::

      semaphore_recipes_capacity{semaphore}
      semaphore_recipes_permits_in_use{semaphore}
      semaphore_recipes_holders{semaphore}
      semaphore_recipes_queue_length{semaphore}                   waiters
      semaphore_recipes_oldest_waiter_age_seconds{semaphore}      0 without waiters
      semaphore_recipes_status_up{semaphore}                      1 if the last read succeeded
      semaphore_recipes_draining{semaphore}                       1 while it drains
      semaphore_recipes_target_capacity{semaphore}                a capacity ramp's target
                                                                  (the capacity without one)

Labels are semaphore names (and fixed enums), never owners or keys, so the number of
series is bounded by the semaphores a process uses. Connection loss: the process metrics
keep counting (a lost permit shows in ``permits_lost_total``, the session in
``session_state``); a status read that fails sets ``status_up`` to 0 and keeps the
last values.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover (the extra is in the test dependencies)
    from .errors import BackendNotInstalled

    raise BackendNotInstalled("Prometheus metrics", "metrics", "prometheus_client") from exc

from ._core.status import Status
from .backend import SessionState
from .errors import SemaphoreError
from .instrumentation import AcquireOutcome, Instrumentation, LostReason

if TYPE_CHECKING:
    from .backend import Backend

__all__ = ["WAIT_BUCKETS", "PrometheusMetrics", "StatusCollector"]

PREFIX = "semaphore_recipes"
#: seconds; a grant at once (a round trip) up to the long waits of a batch queue
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class PrometheusMetrics(Instrumentation):
    """This process's acquires and permits as Prometheus metrics, in ``registry``
    (default: ``prometheus_client``'s global one). One per registry: register the same
    instance with every backend of the process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else REGISTRY
        self.acquisitions = Counter(
            f"{PREFIX}_acquisitions",
            "Acquire calls that ended, by outcome",
            ["semaphore", "outcome"],
            registry=registry,
        )
        self.wait = Histogram(
            f"{PREFIX}_acquire_wait_seconds",
            "Time from an acquire call to its grant",
            ["semaphore"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.held = Gauge(
            f"{PREFIX}_permits_held",
            "Permits held by this process",
            ["semaphore"],
            registry=registry,
        )
        self.waiting = Gauge(
            f"{PREFIX}_requests_waiting",
            "Acquire calls of this process waiting in the queue",
            ["semaphore"],
            registry=registry,
        )
        self.lost = Counter(
            f"{PREFIX}_permits_lost",
            "Permits lost while held: the session or lease ended (session), or the entry "
            "was deleted (entry)",
            ["semaphore", "reason"],
            registry=registry,
        )
        self.revoked = Counter(
            f"{PREFIX}_permits_revoked",
            "Permits held here whose holder was asked to give them back (revoke)",
            ["semaphore"],
            registry=registry,
        )
        self.removals_deferred = Counter(
            f"{PREFIX}_removals_deferred",
            "Acquires that ended without a permit before the store confirmed their entry's "
            "removal, which went on in the background (the store did not answer in time)",
            ["semaphore"],
            registry=registry,
        )
        self._backends: list[Backend] = []
        self._lock = threading.Lock()
        registry.register(_SessionStates(self._session_states))

    # -- the instrumentation hook --
    def attached(self, backend: Backend) -> None:
        with self._lock:
            if backend not in self._backends:
                self._backends.append(backend)

    def acquire_started(self, name: str, permits: int) -> None:
        self.waiting.labels(name).inc()

    def acquire_ended(
        self, name: str, permits: int, outcome: AcquireOutcome, seconds: float
    ) -> None:
        self.waiting.labels(name).dec()
        self.acquisitions.labels(name, outcome.value).inc()
        if outcome is AcquireOutcome.GRANTED:
            self.wait.labels(name).observe(max(0.0, seconds))

    def permit_held(self, name: str, permits: int) -> None:
        self.held.labels(name).inc(permits)

    def permit_dropped(self, name: str, permits: int, lost: LostReason | None) -> None:
        self.held.labels(name).dec(permits)
        if lost is not None:
            self.lost.labels(name, lost.value).inc(permits)

    def permit_revoked(self, name: str, permits: int) -> None:
        self.revoked.labels(name).inc(permits)

    def removal_deferred(self, name: str) -> None:
        self.removals_deferred.labels(name).inc()

    def _session_states(self) -> list[tuple[str, SessionState]]:
        with self._lock:
            backends = list(self._backends)
        return [(backend.scheme, backend.session_state) for backend in backends]


class _SessionStates(Collector):
    """``session_state{backend, state}``: read from the backends on each scrape."""

    def __init__(self, read: Callable[[], list[tuple[str, SessionState]]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            f"{PREFIX}_session_state",
            "The session of each backend of this process: 1 for its current state",
            labels=["backend", "state"],
        )
        for scheme, current in self._read():
            for state in SessionState:
                family.add_metric([scheme, state.value], 1.0 if state is current else 0.0)
        yield family


@dataclass
class _Reading:
    status: Status | None = None
    up: bool = False
    read_at: float = float("-inf")  # monotonic


class StatusCollector(Collector):
    """The store-wide state of ``names``, read with ``read_status(name)`` (e.g.
    ``backend.status``, which writes nothing) when scraped, at most once per
    ``min_interval`` seconds per name so that scrapers cannot load the store. A
    semaphore that does not exist, or a read that fails (the store unreachable within
    its request timeout), reports ``status_up`` 0 (and the last values read, if any).
    ``wall_clock`` ages the waiters (their ``since`` is the writer's Unix time).

    ``list_names`` (e.g. a function of ``backend.list()``): the names are listed again
    with it, at most once per ``min_interval``, and follow the store's semaphores as
    they come and go (a listing that fails keeps the names of the one before); the
    ``names`` given are the first ones."""

    def __init__(
        self,
        read_status: Callable[[str], Status],
        names: Sequence[str],
        *,
        min_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        list_names: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        if min_interval < 0:
            raise ValueError(f"min_interval must be >= 0, not {min_interval}")
        self._read_status = read_status
        self._names = list(dict.fromkeys(names))
        self._min_interval = min_interval
        self._clock = clock
        self._wall_clock = wall_clock
        self._readings = {name: _Reading() for name in self._names}
        self._lock = threading.Lock()  # one read at a time, whatever the scrapers
        self._list_names = list_names
        self._listed_at = -math.inf

    def _follow_the_store(self) -> None:
        """List the names again (``list_names``), when that listing is old enough."""
        if self._list_names is None or self._clock() - self._listed_at < self._min_interval:
            return
        try:
            names = list(dict.fromkeys(self._list_names()))
        except SemaphoreError:
            return  # the names of the last listing stay, their reads say whether they work
        finally:
            self._listed_at = self._clock()
        self._names = names
        self._readings = {name: self._readings.get(name) or _Reading() for name in names}

    def readings(self) -> dict[str, tuple[Status | None, bool]]:
        """Each name's status (None if never read) and whether the last read worked,
        read again where older than ``min_interval``."""
        with self._lock:
            self._follow_the_store()
            for name in self._names:
                reading = self._readings[name]
                if self._clock() - reading.read_at < self._min_interval:
                    continue
                try:
                    reading.status, reading.up = self._read_status(name), True
                except SemaphoreError:
                    reading.up = False
                reading.read_at = self._clock()
            return {name: (r.status, r.up) for name, r in self._readings.items()}

    def collect(self) -> Iterable[GaugeMetricFamily]:
        def family(suffix: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{suffix}", doc, labels=["semaphore"])

        capacity = family("capacity", "Permits in the semaphore (stored capacity)")
        in_use = family("permits_in_use", "Permits held, store-wide")
        holders = family("holders", "Holders, store-wide")
        queue = family("queue_length", "Requests waiting, store-wide")
        oldest = family("oldest_waiter_age_seconds", "Age of the longest-waiting request (0: none)")
        up = family("status_up", "1 if the semaphore's status was read at the last try")
        draining = family("draining", "1 while the semaphore drains (new acquires refused)")
        target = family(
            "target_capacity", "The capacity a ramp is moving to (the capacity without one)"
        )
        now = self._wall_clock()
        for name, (status, ok) in self.readings().items():
            up.add_metric([name], 1.0 if ok else 0.0)
            if status is None:
                continue
            capacity.add_metric([name], status.capacity)
            in_use.add_metric([name], status.used)
            holders.add_metric([name], len(status.holders))
            queue.add_metric([name], len(status.waiters))
            ages = [max(0.0, now - w.since) for w in status.waiters]
            oldest.add_metric([name], max(ages, default=0.0))
            draining.add_metric([name], 1.0 if status.draining else 0.0)
            ramp = status.ramp
            target.add_metric([name], status.capacity if ramp is None else ramp.target)
        return [capacity, in_use, holders, queue, oldest, up, draining, target]
