"""Draining (``drain()``/``resume()``): new acquires fail at once with Draining,
waiters already queued are told and leave the queue, holders keep their permits, and
``drain(wait=True)`` returns after the last release; on every store that declares it,
both faces, seen from another backend of the store."""

from __future__ import annotations

import threading
import time

import pytest

import semaphore_recipes as sr
from semaphore_recipes.backend import Capability
from semaphore_recipes.registry import backend_class
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.polling import wait_until


def _drains(service: Harness) -> None:
    if not backend_class(service.kind).capabilities.has(Capability.DRAIN):
        pytest.skip(f"the {service.kind} backend keeps no drain flag")


def test_drain_refuses_newcomers_tells_waiters_and_spares_holders(service: Harness) -> None:
    _drains(service)
    admin = service.connect().semaphore("dr", capacity=1)
    other = service.connect().semaphore("dr", capacity=1)
    holder = admin.acquire()
    failed: list[BaseException] = []

    def wait_in_queue() -> None:
        try:
            other.acquire(timeout=20).release()
        except BaseException as exc:
            failed.append(exc)

    waiting = threading.Thread(target=wait_in_queue)
    waiting.start()
    wait_until(lambda: len(admin.status().waiters) == 1)
    admin.drain()
    waiting.join(10)
    assert not waiting.is_alive()
    assert len(failed) == 1 and isinstance(failed[0], sr.Draining), failed
    assert failed[0].name == "dr"
    status = admin.status()
    assert status.draining and status.capacity == 1
    assert status.waiters == () and [h.token for h in status.holders] == [holder.token]
    started = time.monotonic()
    with pytest.raises(sr.Draining):
        other.acquire(timeout=10)  # at once, not after the timeout
    assert time.monotonic() - started < 3
    assert admin.status().waiters == ()  # the refused newcomer left no entry
    # holders are untouched: still held, their fenced writes apply
    assert holder.state is sr.PermitState.HELD and not holder.lost.is_set()
    holder.transaction().create(service.connect().data_key("dr"), b"x").commit()
    holder.release()
    admin.resume()
    assert not admin.status().draining
    other.acquire(timeout=10).release()


def test_drain_wait_returns_after_the_last_release(service: Harness) -> None:
    _drains(service)
    admin = service.connect().semaphore("dr-wait", capacity=2)
    clients = [service.connect() for _ in range(2)]  # (kept: each holds one permit)
    holders = [c.semaphore("dr-wait", capacity=2).acquire() for c in clients]
    with pytest.raises(sr.DrainTimeout) as caught:
        admin.drain(wait=True, timeout=0.3)
    assert caught.value.holders == 2 and admin.status().draining
    admin.set_capacity(3)  # a capacity change keeps the flag
    assert admin.status().draining

    def release_all() -> None:
        for h in holders:
            h.release()

    releaser = threading.Timer(0.5, release_all)
    started = time.monotonic()
    releaser.start()
    status = admin.drain(wait=True, timeout=20)
    took = time.monotonic() - started
    assert status is not None and status.holders == () and status.draining
    assert 0.4 <= took < 10, took
    assert all(h.state is sr.PermitState.RELEASED for h in holders)
    admin.resume()
    status = admin.status()
    assert not status.draining and status.capacity == 3
