"""``watch`` while the store does not answer, and after its semaphore is gone: the view
says how old it is, keeps its interval, and shows no library warnings."""

from __future__ import annotations

import itertools
import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from semaphore_recipes.testing.proxy import FaultProxy

from .conftest import CLI, Lines, Store, clean_env

INTERVAL = 0.2
# a bound for "the next refresh": the interval, the watch's 0.5 s allowance for a read,
# and time for a loaded machine (2 cores shared with other test runs)
REFRESH_BOUND = INTERVAL + 0.5 + 3.0
# longer than the session of the test URLs (the plugin's session_timeout, 4 s) and so
# than etcd's lease suspension at 2/3 of it: a session or lease warning would be due
OUTAGE = 6.0


@contextmanager
def proxied(url: str) -> Iterator[tuple[str, list[FaultProxy]]]:
    """``url`` with each of its servers behind a FaultProxy of its own."""
    scheme, rest = url.split("://", 1)
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    hosts, tail = rest[:cut], rest[cut:]
    with ExitStack() as stack:
        proxies = [stack.enter_context(FaultProxy(h).start()) for h in hosts.split(",")]
        yield f"{scheme}://{','.join(p.address for p in proxies)}{tail}", proxies


def spawn_watch(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "watch", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


def stop(proc: subprocess.Popen[Any]) -> str:
    """SIGINT (it exits 0), then its stderr."""
    proc.send_signal(signal.SIGINT)
    try:
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.stderr.read() if proc.stderr is not None else ""


@pytest.mark.parametrize("service", ["zookeeper", "etcd", "redis"], indirect=True)
def test_watch_marks_its_view_stale_while_the_store_does_not_answer(store: Store) -> None:
    backend = store.service.connect(owner="kept")
    sem = backend.semaphore("outage", 2)
    held = sem.acquire()
    with proxied(store.url) as (url, proxies):
        proc = spawn_watch("outage", "--json", "--interval", str(INTERVAL), "--url", url)
        lines = Lines(proc)
        try:
            first = json.loads(lines.next(20))
            assert (first["exists"], first["stale"], first["used"]) == (True, False, 1)
            assert first["unanswered_since"] is None and first["error"] is None
            for p in proxies:
                p.blackhole()
            cut_at = time.time()
            stale = json.loads(lines.next(REFRESH_BOUND))
            assert stale["stale"] is True
            assert stale["unanswered_since"] >= first["read_at"]
            assert stale["unanswered_since"] <= stale["time"]
            assert stale["read_at"] <= cut_at  # the last answer, kept
            assert [h["owner"] for h in stale["holders"]] == ["kept"]
            time.sleep(OUTAGE)
            for p in proxies:
                p.cut()  # bytes were lost: these connections cannot go on
                p.restore()
            deadline = time.monotonic() + 60
            while True:
                doc = json.loads(lines.next(max(0.1, deadline - time.monotonic())))
                if not doc["stale"]:
                    break
                assert doc["unanswered_since"] == stale["unanswered_since"]
            assert doc["exists"] is True and doc["read_at"] > cut_at + OUTAGE
            assert doc["unanswered_since"] is None and doc["error"] is None
        finally:
            err = stop(proc)
    assert "Traceback" not in err
    assert "WARNING" not in err, err  # the watcher's lease and session hold nothing
    held.release()


@pytest.mark.parametrize("service", ["zookeeper", "etcd", "redis"], indirect=True)
def test_watch_says_when_its_semaphore_no_longer_exists(store: Store) -> None:
    store.service.connect().semaphore("doomed", 1)
    proc = spawn_watch("doomed", "--json", "--interval", str(INTERVAL), "--url", store.url)
    lines = Lines(proc)
    try:
        assert json.loads(lines.next(20))["exists"] is True
        store.service.connect().delete_semaphore("doomed")  # as a store that lost its data
        gone = json.loads(lines.next(REFRESH_BOUND))
        assert (gone["exists"], gone["stale"]) == (False, False)
        assert "capacity" not in gone and "holders" not in gone
        store.service.connect().semaphore("doomed", 4)
        back = json.loads(lines.next(REFRESH_BOUND))
        assert (back["exists"], back["capacity"]) == (True, 4)
    finally:
        err = stop(proc)
    assert "Traceback" not in err


@pytest.mark.parametrize("service", ["etcd"], indirect=True)
def test_watch_on_a_terminal_redraws_every_interval_and_logs_under_the_table(
    store: Store,
) -> None:
    """On a terminal, through an outage longer than etcd's lease suspension: a screen
    every interval (none missed for long), the stale mark, and with ``-v`` the
    library's messages only under the table (never across it)."""
    store.service.connect().semaphore("screen", 3)
    with proxied(store.url) as (url, proxies):
        parent, child = pty.openpty()
        proc = subprocess.Popen(
            [*CLI, "watch", "screen", "-v", "--interval", str(INTERVAL), "--url", url],
            stdin=child,
            stdout=child,
            stderr=child,
            env=clean_env(),
        )
        os.close(child)
        term = Terminal(parent)
        try:
            term.read(3.0)
            for p in proxies:
                p.blackhole()
            cut_at = time.monotonic()
            term.read(OUTAGE)
            in_outage = [t for t in term.screens if t >= cut_at]
            for p in proxies:
                p.cut()
                p.restore()
            proc.send_signal(signal.SIGINT)
            term.read(5.0)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(parent)
    text = term.data.decode(errors="replace")
    assert "Traceback" not in text
    before, *frames = text.split(CLEAR.decode())
    assert before.strip() == "", before  # nothing printed outside a screen
    assert any("stale: store not answering since" in f for f in frames), frames[-1]
    for frame in frames:
        rows = frame.strip("\r\n").splitlines()
        assert rows[0].startswith(f"every {INTERVAL:g}s: ")
        logged = [i for i, row in enumerate(rows) if "semaphore-recipes: " in row]
        table = [i for i, row in enumerate(rows) if row.startswith(("screen:", "stale:"))]
        assert not logged or not table or min(logged) > max(table), frame
    ends = [cut_at, *in_outage, cut_at + OUTAGE]
    gaps = [b - a for a, b in itertools.pairwise(ends)]
    assert max(gaps) < REFRESH_BOUND, gaps  # the screen kept its interval in the outage


class Terminal:
    """The parent side of a pty: what the program wrote, and when each screen came."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = b""
        self.screens: list[float] = []  # monotonic arrival time of each redraw

    def read(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # the other side closed
                return
            if not chunk:
                return
            now = time.monotonic()
            self.screens.extend(now for _ in range(chunk.count(CLEAR)))
            self.data += chunk


CLEAR = b"\x1b[H\x1b[J"
