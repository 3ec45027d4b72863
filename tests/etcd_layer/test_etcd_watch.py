"""Watcher against a real etcd: events, resume after a restart, compaction."""

from __future__ import annotations

import functools
import threading

from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.errors import EtcdCompacted
from semaphore_recipes.etcd.ops import prefix_range_end
from semaphore_recipes.etcd.watch import Event, Watcher
from semaphore_recipes.testing.etcd_server import EtcdServer

from .helpers import compact, retry, wait_until


class Sink:
    """Collects (type, key, mod_revision) of delivered events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []
        self.header_revisions: list[int] = []
        self.errors: list[Exception] = []
        self.lock = threading.Lock()

    def on_events(self, events: list[Event], revision: int) -> None:
        with self.lock:
            for ev in events:
                kind = "DELETE" if ev.type == Event.DELETE else "PUT"
                self.events.append((kind, ev.kv.key.decode(), ev.kv.mod_revision))
            self.header_revisions.append(revision)

    def on_error(self, exc: Exception) -> None:
        self.errors.append(exc)

    def snapshot(self) -> list[tuple[str, str, int]]:
        with self.lock:
            return list(self.events)


def test_put_and_delete_events_of_a_prefix(client: EtcdClient, ns: str) -> None:
    for name in ("a", "b", "c"):
        client.put(ns + name, "x")
    start = client.put(ns + "d", "x").header.revision + 1
    sink = Sink()
    watcher = Watcher(
        client,
        ns,
        prefix_range_end(ns),
        start_revision=start,
        on_events=sink.on_events,
        on_error=sink.on_error,
    )
    try:
        assert watcher.created.wait(5.0)
        client.delete_range(ns + "b")
        client.put(ns + "e", "x")
        client.delete_range(ns, prefix_range_end(ns))  # a, c, d, e in one revision
        wait_until(lambda: len(sink.events) == 6, 5.0, "six events")
        events = sink.snapshot()
        assert [kind for kind, _, _ in events] == ["DELETE", "PUT"] + ["DELETE"] * 4
        assert [key[len(ns) :] for _, key, _ in events] == ["b", "e", "a", "c", "d", "e"]
        revs = [rev for _, _, rev in events]
        assert revs[0] == start and revs[1] == start + 1
        assert revs[2:] == [start + 2] * 4
        assert sink.header_revisions[-1] >= revs[-1]
        assert watcher.next_revision == revs[-1] + 1
        assert sink.errors == []
    finally:
        watcher.cancel()
    assert not watcher.running


def test_watch_from_now_and_prev_kv(client: EtcdClient, ns: str) -> None:
    client.put(ns + "k", "old")
    got: list[Event] = []
    watcher = Watcher(
        client,
        ns + "k",
        start_revision=0,
        prev_kv=True,
        on_events=lambda evs, _rev: got.extend(evs),
    )
    try:
        assert watcher.created.wait(5.0)
        assert watcher.next_revision > 0
        client.put(ns + "k", "new")
        wait_until(lambda: len(got) == 1, 5.0, "one event")
        assert got[0].kv.value == b"new" and got[0].prev_kv.value == b"old"
    finally:
        watcher.cancel()


def test_resume_after_restart_without_missing_events(scratch_server: EtcdServer, ns: str) -> None:
    """The watcher's thread is held inside its callback while the server restarts and
    three writes happen; released, it must re-create the watch from last revision + 1
    and deliver exactly those writes."""
    gate = threading.Event()
    sink = Sink()

    def on_events(events: list[Event], revision: int) -> None:
        sink.on_events(events, revision)
        gate.wait(20.0)

    with (
        EtcdClient([scratch_server.endpoint]) as wclient,
        EtcdClient([scratch_server.endpoint]) as writer,
    ):
        start = writer.put(ns + "k0", "x").header.revision + 1
        watcher = Watcher(
            wclient,
            ns,
            prefix_range_end(ns),
            start_revision=start,
            on_events=on_events,
            on_error=sink.on_error,
        )
        try:
            assert watcher.created.wait(5.0)
            first = writer.put(ns + "k1", "x").header.revision
            wait_until(lambda: len(sink.events) == 1, 5.0, "the first event")

            scratch_server.restart()  # the stream breaks while the callback is blocked
            missed = [
                retry(lambda: writer.put(ns + "k2", "x")).header.revision,
                writer.put(ns + "k3", "x").header.revision,
                writer.delete_range(ns + "k1").header.revision,
            ]
            assert watcher.reconnects == 0  # still inside the callback
            gate.set()
            wait_until(lambda: len(sink.events) == 4, 10.0, "the events made while down")
            assert sink.snapshot() == [
                ("PUT", ns + "k1", first),
                ("PUT", ns + "k2", missed[0]),
                ("PUT", ns + "k3", missed[1]),
                ("DELETE", ns + "k1", missed[2]),
            ]
            assert watcher.reconnects >= 1

            # a second restart, callback free this time
            scratch_server.restart()
            last = retry(lambda: writer.put(ns + "k4", "x")).header.revision
            wait_until(lambda: len(sink.events) == 5, 10.0, "the event after the 2nd restart")
            assert sink.snapshot()[-1] == ("PUT", ns + "k4", last)
            assert [rev for _, _, rev in sink.snapshot()] == [first, *missed, last]
            assert sink.errors == []
        finally:
            gate.set()
            watcher.cancel()
        assert not watcher.running


def test_compacted_start_revision_is_reported(client: EtcdClient, ns: str) -> None:
    old = client.put(ns + "k", "1").header.revision
    now = client.put(ns + "k", "2").header.revision
    compact(client, now)
    sink = Sink()
    watcher = Watcher(
        client, ns + "k", start_revision=old, on_events=sink.on_events, on_error=sink.on_error
    )
    try:
        wait_until(lambda: sink.errors, 5.0, "the compaction error")
        err = sink.errors[0]
        assert isinstance(err, EtcdCompacted)
        assert err.compact_revision == now
        wait_until(lambda: not watcher.running, 5.0, "the watcher to stop")
        assert watcher.error is err and sink.events == []
    finally:
        watcher.cancel()


def test_cancel_from_callback_and_closed_client(etcd_server: EtcdServer, ns: str) -> None:
    client = EtcdClient([etcd_server.endpoint])
    holder: list[Watcher] = []
    seen = threading.Event()

    def on_events(events: list[Event], revision: int) -> None:
        seen.set()
        holder[0].cancel()  # must not deadlock on its own thread

    holder.append(Watcher(client, ns, prefix_range_end(ns), start_revision=0, on_events=on_events))
    assert holder[0].created.wait(5.0)
    client.put(ns + "x", "1")
    assert seen.wait(5.0)
    wait_until(lambda: not holder[0].running, 5.0, "the watcher to stop")

    other = Watcher(client, ns, prefix_range_end(ns), start_revision=0, on_events=on_events)
    assert other.created.wait(5.0)
    client.close()
    wait_until(lambda: not other.running, 5.0, "the watcher of a closed client to stop")


def has_events(sink: Sink) -> bool:
    return bool(sink.snapshot())


def test_many_watches_share_one_stream_and_each_gets_its_own_events(
    etcd_server: EtcdServer, ns: str
) -> None:
    """40 watches of one client open one Watch stream on the server (they opened one
    each before); each gets exactly the events of its own key; a watch cancelled before
    or after its create was confirmed gets nothing more, and the others carry on."""

    def streams_opened() -> float:
        return etcd_server.metrics().total("grpc_server_started_total", grpc_method="Watch")

    with EtcdClient([etcd_server.endpoint]) as client:
        before = streams_opened()
        sinks = [Sink() for _ in range(40)]
        watchers = [
            Watcher(client, f"{ns}k{i}", start_revision=0, on_events=sink.on_events)
            for i, sink in enumerate(sinks)
        ]
        early = Watcher(client, f"{ns}k0", start_revision=0, on_events=sinks[0].on_events)
        early.cancel()  # most likely before the server confirmed it
        try:
            for watcher in watchers:
                assert watcher.created.wait(5.0)
            assert streams_opened() - before == 1
            watchers[1].cancel()
            revisions = [client.put(f"{ns}k{i}", "v").header.revision for i in range(40)]
            for i, sink in enumerate(sinks):
                if i != 1:
                    wait_until(functools.partial(has_events, sink), 5.0, f"the event of k{i}")
            client.put(f"{ns}k0", "again")  # a second event, for k0 only
            wait_until(lambda: len(sinks[0].events) == 2, 5.0, "k0's second event")
            for i, sink in enumerate(sinks):
                expected = [] if i == 1 else [("PUT", f"{ns}k{i}", revisions[i])]
                assert sink.snapshot()[:1] == expected[:1], i
                assert len(sink.snapshot()) == (2 if i == 0 else len(expected)), i
            assert not early.running and not watchers[1].running
            assert streams_opened() - before == 1
        finally:
            for watcher in watchers:
                watcher.cancel()
