"""A client cycling alone skips the listing: one request per acquire. These check that it
does, and that anything another client does in between makes it list again."""

from __future__ import annotations

from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness

from ..conftest import wait_until


def test_a_client_cycling_alone_sends_one_request_per_acquire(
    zk: ZooKeeperHarness, zookeeper_server: Any
) -> None:
    sem = zk.connect().semaphore("alone", capacity=2)
    sem.acquire().release()  # this one lists, and finds itself alone
    before = zookeeper_server.mntr()["zk_packets_received"]
    for _ in range(40):
        sem.acquire().release()
    after = zookeeper_server.mntr()["zk_packets_received"]
    # create + delete per cycle (+1 for mntr's own connection, pings are seconds apart);
    # with the listing it would be 3 per cycle
    assert (after - before) / 40 < 2.3


def test_an_entry_made_between_two_cycles_is_seen(zk: ZooKeeperHarness) -> None:
    sem = zk.connect().semaphore("alone-guard", capacity=1)
    other = zk.connect().semaphore("alone-guard", capacity=1)
    sem.acquire().release()  # the next acquire of sem skips the listing if it can
    held = other.acquire()
    with pytest.raises(sr.WouldBlock):
        sem.acquire(blocking=False)
    held.release()
    sem.acquire().release()
    other.acquire().release()  # an entry made and gone between two of sem's cycles
    sem.acquire(timeout=5).release()
    assert zk.entries() == []


def test_a_capacity_lowered_just_before_an_acquire_is_obeyed(zk: ZooKeeperHarness) -> None:
    sem = zk.connect().semaphore("alone-capacity", capacity=3)
    admin = zk.connect().semaphore("alone-capacity", capacity=3)
    for _ in range(15):
        sem.acquire(2).release()  # alone: the next acquire may skip the listing
        admin.set_capacity(1)
        # Whether or not sem has heard of the change yet, 2 permits must not be granted.
        with pytest.raises((sr.WouldBlock, ValueError)):
            sem.acquire(2, blocking=False).release()
        admin.set_capacity(3)
        wait_until(lambda: sem.capacity == 3)
    assert zk.entries() == []
