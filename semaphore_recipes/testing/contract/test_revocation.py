"""Revocation (``revoke()``): the holder asked sees ``revoke_requested`` and the others
do not, the next waiter is granted when it releases; with ``force`` its entry is
removed after the grace, its fenced write refused, its ``lost`` set, and the next
waiter granted. On every store that declares it, both faces, seen from other backends
of the store; never more permits held than the capacity."""

from __future__ import annotations

import threading

import pytest

import semaphore_recipes as sr
from semaphore_recipes.backend import Capability
from semaphore_recipes.registry import backend_class
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.polling import wait_until


def _revokes(service: Harness) -> None:
    if not backend_class(service.kind).capabilities.has(Capability.REVOKE):
        pytest.skip(f"the {service.kind} backend cannot revoke")


class _Waiting(threading.Thread):
    """An acquire waiting in the queue on a backend of its own."""

    def __init__(self, service: Harness, name: str, capacity: int) -> None:
        super().__init__(daemon=True)
        self.semaphore = service.connect().semaphore(name, capacity=capacity)
        self.granted = threading.Event()
        self.failed: list[BaseException] = []

    def run(self) -> None:
        try:
            with self.semaphore.acquire(timeout=20):
                self.granted.set()
        except BaseException as exc:
            self.failed.append(exc)


def _never_above(admin: sr.Semaphore, capacity: int) -> None:
    assert admin.status().used <= capacity


def test_revoke_asks_only_the_holder_named(service: Harness) -> None:
    _revokes(service)
    admin = service.connect().semaphore("rv", capacity=2)
    clients = [service.connect() for _ in range(2)]
    first, second = (c.semaphore("rv", capacity=2).acquire(watch_entry=True) for c in clients)
    waiting = _Waiting(service, "rv", 2)
    waiting.start()
    wait_until(lambda: len(admin.status().waiters) == 1)
    with pytest.raises(ValueError):
        admin.revoke(token=first.token, all=True)
    with pytest.raises(ValueError):
        admin.revoke(token=first.token, grace=-1)
    assert admin.revoke(token=first.token) == sr.Revoked(asked=1, removed=0)
    assert first.revoke_requested.wait(10)
    assert not second.revoke_requested.is_set()
    shown = {h.token: h.revoke_requested for h in admin.status().holders}
    assert shown == {first.token: True, second.token: False}
    assert first.state is sr.PermitState.HELD  # a request only: the holder decides
    _never_above(admin, 2)
    assert not waiting.granted.is_set()
    first.release()
    assert waiting.granted.wait(10), waiting.failed
    waiting.join(10)
    assert waiting.failed == []
    assert admin.revoke(token=first.token) == sr.Revoked(asked=0)  # gone: nobody asked
    second.release()


def test_forced_revoke_removes_the_entry_and_fences_the_old_holder(service: Harness) -> None:
    _revokes(service)
    admin = service.connect().semaphore("rv-force", capacity=1)
    client = service.connect()
    holder = client.semaphore("rv-force", capacity=1).acquire(watch_entry=True)
    waiting = _Waiting(service, "rv-force", 1)
    waiting.start()
    wait_until(lambda: len(admin.status().waiters) == 1)
    revoked = admin.revoke(token=holder.token, force=True, grace=0.2)
    assert revoked == sr.Revoked(asked=1, removed=1)
    assert holder.revoke_requested.wait(10)
    assert holder.lost.wait(10)
    assert holder.state is sr.PermitState.LOST
    with pytest.raises(sr.PermitLost):
        holder.transaction().create(client.data_key("rv-force"), b"late").commit()
    assert waiting.granted.wait(10), waiting.failed
    _never_above(admin, 1)
    waiting.join(10)
    assert waiting.failed == []
    holder.release()  # (its entry is gone: nothing else of it is removed)
    assert admin.status().holders == ()


def test_a_request_outlives_the_holders_later_held_mark(service: Harness) -> None:
    _revokes(service)
    admin = service.connect().semaphore("rv-mark", capacity=2)
    client = service.connect()
    holder = client.semaphore("rv-mark", capacity=2).acquire(watch_entry=True)
    assert admin.revoke(owner=holder.owner).asked == 1
    assert holder.revoke_requested.wait(10)
    admin.set_capacity(1)  # a holder whose mark was deferred writes it now
    wait_until(lambda: admin.status().holders[0].held)
    (shown,) = admin.status().holders
    assert shown.revoke_requested and shown.token == holder.token
    assert holder.state is sr.PermitState.HELD
    holder.release()
