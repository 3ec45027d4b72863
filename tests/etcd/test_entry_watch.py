"""A waiter's watch of a lower entry is made from "now" and confirmed before the entry is
read; its events wait for the read, those up to the read's revision are dropped as the
read's (``etcd/entry_watch.py``). A watch from the read's revision is past already under
contention, and etcd serves those from a loop every 100 ms."""

from __future__ import annotations

import json
from typing import Any

import pytest

from semaphore_recipes._core.codec import EntryData
from semaphore_recipes._core.names import parse_etcd_entry
from semaphore_recipes._core.program import run_program
from semaphore_recipes._core.protocol import (
    Arm,
    EntryChanged,
    EntryDeleted,
    EntryMarked,
)
from semaphore_recipes.etcd import entry_watch
from semaphore_recipes.etcd._proto import etcd_api_pb2 as pb
from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.entry_watch import EntryWatch
from semaphore_recipes.etcd.rpc import AwaitCreated, Call
from semaphore_recipes.testing.etcd_harness import EtcdHarness

from ..conftest import wait_until
from .waiting import RecordingWaiter, enqueued_by_hand


def mark(revision: int) -> Any:
    value = EntryData(owner="o", held=True, since=0.0, lower=("a", "b")).encode()
    return pb.Event(type=pb.Event.PUT, kv=pb.KeyValue(key=b"k", value=value, mod_revision=revision))


def delete(revision: int) -> Any:
    return pb.Event(type=pb.Event.DELETE, kv=pb.KeyValue(key=b"k", mod_revision=revision))


def watched() -> tuple[RecordingWaiter, EntryWatch, list[str]]:
    waiter = RecordingWaiter()
    fired: list[str] = []
    return waiter, EntryWatch(waiter, 7, "k", fired.append), fired


def test_events_wait_for_the_read_and_those_in_it_are_dropped() -> None:
    waiter, watch, fired = watched()
    watch.on_events([mark(10), mark(12)], 12)
    assert waiter.events == []  # the read is not in yet
    watch.open(token=5, read_at=11, created_at=9)
    assert waiter.events == [(7, EntryMarked("k", ("a", "b")))]  # 10 was in the read
    watch.on_events([delete(13)], 13)
    assert waiter.events[1:] == [(7, EntryDeleted("k", None))]
    assert fired == ["k"]
    watch.on_events([mark(14), delete(15)], 15)  # the key serves a newer entry
    assert len(waiter.events) == 2 and fired == ["k"]


def test_a_watch_confirmed_after_the_read_has_the_entry_read_again() -> None:
    waiter, watch, fired = watched()
    watch.open(token=5, read_at=11, created_at=12)  # confirmed after the read
    assert waiter.events == [(7, EntryChanged("k"))]
    assert fired == ["k"]

    waiter, watch, fired = watched()
    watch.open(token=5, read_at=11, created_at=None)  # not confirmed yet
    watch.confirmed_late(11)
    assert waiter.events == [] and fired == []
    watch.confirmed_late(12)
    assert waiter.events == [(7, EntryChanged("k"))] and fired == ["k"]


def test_an_error_fires_the_watch_once() -> None:
    waiter, watch, fired = watched()
    watch.on_error(RuntimeError("permission denied"))
    watch.open(token=5, read_at=11, created_at=9)
    watch.on_events([delete(12)], 12)
    assert waiter.events == [(7, EntryChanged("k"))] and fired == ["k"]


def test_a_change_other_than_a_mark_has_the_entry_read_again() -> None:
    waiter, watch, fired = watched()
    watch.open(token=5, read_at=11, created_at=9)
    value = json.dumps({"owner": "o", "held": False, "since": 0.0}).encode()
    put = pb.Event(type=pb.Event.PUT, kv=pb.KeyValue(key=b"k", value=value, mod_revision=12))
    watch.on_events([put], 12)
    assert waiter.events == [(7, EntryChanged("k"))] and fired == ["k"]


def test_the_arm_reads_after_its_watches_are_confirmed(
    ed: EtcdHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a real etcd: the watch is confirmed before the read; a mark written between
    the two is in the read and not handed over again; the holder's release after the
    read reaches the waiter."""
    opened: list[tuple[int, int, int | None]] = []
    real_open = EntryWatch.open

    def open_(self: EntryWatch, token: int, read_at: int, created_at: int | None) -> None:
        opened.append((token, read_at, created_at))
        real_open(self, token, read_at, created_at)

    monkeypatch.setattr(entry_watch.EntryWatch, "open", open_)
    holder = ed.connect().semaphore("armed", capacity=1).acquire()
    with enqueued_by_hand(ed, "armed", capacity=1) as by_hand:
        queue, runner, waiter = by_hand.queue, by_hand.runner, by_hand.waiter
        holder_key = queue.entry_key(holder.key)
        confirmed: list[int | None] = []
        client = queue.client
        assert isinstance(client, EtcdClient)

        def answer(request: object) -> object:
            if isinstance(request, AwaitCreated):
                reply = runner.answer(request)
                confirmed.extend(w.created_revision for w in request.watchers)
                # the holder marked held after the watch began, before the read
                lease, _ = parse_etcd_entry(holder.key)
                held = EntryData(owner="h", held=True, since=0.0, lower=()).encode()
                client.put(holder_key, held, lease=lease)
                return reply
            assert isinstance(request, Call)
            return runner.answer(request)

        step = queue.step(waiter, Arm((holder.key,)), by_hand.deadline)
        states = run_program(step, answer)
        assert isinstance(states, dict) and states[holder.key] is not None
        assert states[holder.key].held  # the mark is in the read...
        ((_, read_at, created_at),), (confirmed_at,) = opened, confirmed
        assert created_at is not None and created_at == confirmed_at
        assert created_at <= read_at
        holder.release()
        wait_until(lambda: any(isinstance(e, EntryDeleted) for _, e in waiter.events))
        # ...and not handed over again: it would have come before the delete (one stream)
        assert [type(e) for _, e in waiter.events] == [EntryDeleted]
