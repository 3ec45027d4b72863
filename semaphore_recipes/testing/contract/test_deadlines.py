"""``acquire(timeout=T)`` answers at T even when the store goes silent, on every store
and both faces; the entry it may have left is removed in the background, once the
network heals or with the session.

The client is black-holed (bytes vanish both ways, nothing closes), so nothing tells
it the store is gone: only its own deadline can end the wait.
"""

from __future__ import annotations

import threading
import time

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Cut, Harness, Verb
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.services import needs

TIMEOUT = 2.0
#: what the answer may take past the deadline: the thread's wake-up on a loaded machine
MARGIN = 0.5
SESSION_TIMEOUT = 8.0


def _acquire_in_thread(
    sem: sr.Semaphore, timeout: float
) -> tuple[threading.Thread, list[tuple[float, object]]]:
    """``sem.acquire(timeout)`` in a thread; its list gets (seconds taken, outcome)."""
    out: list[tuple[float, object]] = []

    def run() -> None:
        started = time.monotonic()
        try:
            outcome: object = sem.acquire(timeout=timeout)
        except Exception as exc:
            outcome = exc
        out.append((time.monotonic() - started, outcome))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("cut_while", ["waiting", "entering"])
def test_a_silent_store_answers_at_the_deadline(service: Harness, cut_while: str) -> None:
    """A busy semaphore, the waiter's connections black-holed while it waits in the
    queue (``waiting``), or before its create was sent (``entering``): ``acquire`` ends
    within ``timeout`` + 0.5 s, with AcquireTimeout or BackendUnavailable, and nothing
    it made outlives the healing by more than the session timeout + 1 s."""
    needs(service, Verb.CUT)
    holder = service.connect().semaphore("silent", capacity=1)
    held = holder.acquire()
    backend = service.connect(proxied=True, session_timeout=SESSION_TIMEOUT)
    sem = backend.semaphore("silent", capacity=1)
    if cut_while == "waiting":
        thread, out = _acquire_in_thread(sem, timeout=TIMEOUT + 1.0)
        wait_until(lambda: len(holder.status().waiters) == 1)
        service.cut(backend, Cut.SILENT)
        thread.join(TIMEOUT + 1.0 + MARGIN + 5)
        took, outcome = out[0] if out else (None, None)
        limit = TIMEOUT + 1.0 + MARGIN
    else:
        service.cut(backend, Cut.SILENT)
        thread, out = _acquire_in_thread(sem, timeout=TIMEOUT)
        thread.join(TIMEOUT + MARGIN + 5)
        took, outcome = out[0] if out else (None, None)
        limit = TIMEOUT + MARGIN
    assert took is not None, "acquire did not return"
    # (the figure, for the record: pytest -s prints it)
    print(f"{service.kind}-{service.face.value} {cut_while}: {took:.2f} s ({outcome!r})")
    assert isinstance(outcome, (sr.AcquireTimeout, sr.BackendUnavailable)), outcome
    assert took <= limit, f"acquire(timeout) returned after {took:.2f} s (limit {limit:.1f})"
    service.restore(backend)
    healed = time.monotonic()
    wait_until(lambda: _ids(service.entries("silent")) == [held.key], timeout=SESSION_TIMEOUT + 1)
    assert time.monotonic() - healed <= SESSION_TIMEOUT + 1
    held.release()
    # the backend works again once the store answers
    sem.acquire(timeout=SESSION_TIMEOUT + 5).release()


def _ids(entries: list[str]) -> list[str]:
    return [entry.rsplit("/", 1)[1] for entry in entries]
