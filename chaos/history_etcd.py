"""etcd's own history: a watch of the whole key space from revision 1 (the cluster runs
with compaction off), with prev_kv so deletes carry what was deleted.

A lease's expiry or revoke shows as deletes of its keys in one revision; etcd does not
say why a key went, so a revision deleting several keys of one lease is taken for a
session end and a lone delete for a delete (the checker only needs the cause for
overtaking, and lease ends happen inside fault windows). etcd keeps no wall-clock time:
the runner puts the time into a clock key a few times a second, and each event gets the
time of the last tick at or before its revision (a lower bound, late by < one tick), or
no time where the ticks were more than a second apart.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.watch import Watcher

from .model import (
    CapacitySet,
    DeleteCause,
    EntryCreated,
    EntryDeleted,
    FencedWrite,
    HistoryEvent,
    Marker,
)


@dataclass(frozen=True)
class RawEvent:
    deleted: bool
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int  # for a delete: the revision of the delete
    lease: int


@dataclass(frozen=True)
class EtcdLayout:
    entries_prefix: bytes  # <prefix><name>/entries/
    config_key: bytes  # <prefix><name>/config: {"capacity": N}
    data_key: bytes  # every fenced write puts here
    marker_key: bytes
    clock_key: bytes


def read_history(
    client: EtcdClient, until_revision: int, timeout: float = 60.0, prefix: bytes = b"/"
) -> list[RawEvent]:
    """Every event under ``prefix`` from revision 1 through ``until_revision``."""
    events: list[RawEvent] = []
    done = threading.Event()
    failed: list[Exception] = []

    def on_events(batch: list[Any], revision: int) -> None:
        for event in batch:
            kv = event.kv
            deleted = event.type == 1  # DELETE
            source = event.prev_kv if deleted and event.HasField("prev_kv") else kv
            events.append(
                RawEvent(
                    deleted,
                    bytes(kv.key),
                    bytes(source.value),
                    int(source.create_revision),
                    int(kv.mod_revision),
                    int(source.lease),
                )
            )
        if events and events[-1].mod_revision >= until_revision:
            done.set()

    def on_error(exc: Exception) -> None:
        failed.append(exc)
        done.set()

    end = prefix[:-1] + bytes([prefix[-1] + 1])
    watcher = Watcher(
        client, prefix, end, start_revision=1, prev_kv=True, on_events=on_events,
        on_error=on_error,
    )  # fmt: skip
    try:
        if not done.wait(timeout):
            raise TimeoutError(
                f"etcd history: revision {until_revision} not reached in {timeout} s"
            )
    finally:
        watcher.cancel(timeout=5)
    if failed:
        raise RuntimeError(f"etcd history watch failed: {failed[0]!r}")
    return [e for e in events if e.mod_revision <= until_revision]


def normalize(raw: Iterable[RawEvent], layout: EtcdLayout) -> list[HistoryEvent]:
    raw = list(raw)
    lease_deletes = Counter(
        (e.mod_revision, e.lease)
        for e in raw
        if e.deleted and e.key.startswith(layout.entries_prefix)
    )
    events: list[HistoryEvent] = []
    at = clock(raw, layout.clock_key)
    for e in raw:
        if e.key == layout.clock_key:
            continue
        now = at(e.mod_revision)
        if e.key.startswith(layout.entries_prefix):
            key = e.key[len(layout.entries_prefix) :].decode()
            if e.deleted:
                several = lease_deletes[(e.mod_revision, e.lease)] > 1
                cause = DeleteCause.SESSION_END if several else DeleteCause.DELETE
                events.append(EntryDeleted(e.mod_revision, now, key, e.create_revision, cause))
            elif e.create_revision == e.mod_revision:
                doc = json.loads(e.value)
                events.append(
                    EntryCreated(
                        e.mod_revision, now, key, e.create_revision, int(doc["w"]), doc["owner"],
                        e.lease,
                    )
                )  # fmt: skip
        elif e.deleted:
            continue
        elif e.key == layout.config_key:
            events.append(CapacitySet(e.mod_revision, now, int(json.loads(e.value)["capacity"])))
        elif e.key == layout.data_key:
            if not e.value:
                continue  # the empty key made at the start, for fenced sets to replace
            doc = json.loads(e.value)
            events.append(
                FencedWrite(e.mod_revision, now, doc["key"], int(doc["token"]), doc["writer"])
            )
        elif e.key == layout.marker_key:
            events.append(Marker(e.mod_revision, now, e.value.decode()))
    return events


MAX_TICK_GAP = 1.0  # seconds between clock ticks beyond which times are not trusted


def clock(raw: list[RawEvent], clock_key: bytes) -> Callable[[int], float | None]:
    """The time of a revision (for Redis: a command's position in its AOF): the last tick at
    or before it, or None when the next tick came more than MAX_TICK_GAP later (the
    ticker was held up: no bound)."""
    ticks = [(e.mod_revision, float(e.value)) for e in raw if e.key == clock_key and not e.deleted]
    revisions = [r for r, _ in ticks]

    def at(revision: int) -> float | None:
        i = bisect.bisect_right(revisions, revision) - 1
        if i < 0 or i + 1 >= len(ticks) or ticks[i + 1][1] - ticks[i][1] > MAX_TICK_GAP:
            return None
        return ticks[i][1]

    return at


def live_leases(client: EtcdClient, leases: Iterable[int]) -> list[str]:
    """The leases among ``leases`` that still exist (hex ids)."""
    alive = []
    for lease in sorted(set(leases)):
        if lease and client.lease_time_to_live(lease, timeout=5.0).TTL > 0:
            alive.append(f"{lease:x}")
    return alive
