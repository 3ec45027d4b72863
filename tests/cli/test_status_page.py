"""The exporter's status page, ``/``, rendered by a real headless browser (Debian's
chromium): it shows the same holders and waiters, in the same order, as ``status
--json``, and escapes what comes from the store."""

from __future__ import annotations

import json
import subprocess
import threading
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from semaphore_recipes import EntryStatus, Semaphore, Status
from semaphore_recipes.cli._status_page import status_page
from semaphore_recipes.devtools.programs import find_program
from semaphore_recipes.testing.harness import Harness

from .conftest import Spawner, Store, cli, wait_for
from .test_hold import Sidecar

ETCD_ONLY = pytest.mark.parametrize("service", ["etcd"], indirect=True)
COLUMNS = ("position", "state", "permits", "token", "slots", "age", "owner")


class _Rows(HTMLParser):
    """The rows of the page's tables, as the browser left them: {cell class: text}."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self._cells: list[str] | None = None
        self._state = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr" and dict(attrs).get("class") in ("holding", "waiting"):
            self._cells, self._state = [], str(dict(attrs)["class"])
        elif tag == "td" and self._cells is not None:
            self._cells.append("")

    def handle_data(self, data: str) -> None:
        if self._cells:
            self._cells[-1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._cells is not None:
            self.rows.append(dict(zip(COLUMNS, self._cells, strict=True)))
            self._cells = None


def rendered_rows(url: str, tmp_path: Path) -> list[dict[str, str]]:
    """The page at ``url`` as chromium renders it (its DOM after loading)."""
    dom = subprocess.run(
        [
            find_program("chromium"), "--headless", "--no-sandbox", "--disable-gpu",
            f"--user-data-dir={tmp_path / 'chromium'}", "--dump-dom", url,
        ],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    parser = _Rows()
    parser.feed(dom)
    return parser.rows


def _as_page_shows(entry: dict[str, Any], state: str) -> dict[str, str]:
    return {
        "position": str(entry["position"]),
        "state": state,
        "permits": str(entry["permits"]),
        "token": str(entry["token"]),
        "slots": ",".join(map(str, entry["slots"])) or "-",
        "owner": entry["owner"],
    }


@ETCD_ONLY
def test_the_page_renders_the_holders_and_waiters_of_status_json(
    store: Store, service: Harness, spawn: Spawner, tmp_path: Path
) -> None:
    holding = service.connect(owner="holder-a")
    sem = holding.semaphore("page", capacity=3)
    permits = [sem.acquire(2, slot=True), sem.acquire(1, slot=True)]
    waiting = []
    granted: list[int] = []

    def wait_then_release(other: Semaphore, weight: int) -> None:
        other.acquire(weight, timeout=60).release()
        granted.append(weight)

    for i, weight in enumerate((2, 1)):
        other = service.connect(owner=f"waiter-{i}").semaphore("page", capacity=3)
        thread = threading.Thread(target=wait_then_release, args=(other, weight), daemon=True)
        thread.start()
        wait_for(lambda n=i + 1: len(sem.status().waiters) == n, 20, "a waiter queued")
        waiting.append(thread)
    exporter = Sidecar(
        spawn(
            "exporter", "page", "--url", store.url, "--listen", "127.0.0.1:0",
            "--min-interval", "0",
        )
    )  # fmt: skip
    code, body = exporter.get("/")
    assert code == 200 and "<table>" in body, body
    rows = rendered_rows(exporter.base + "/", tmp_path)
    status = cli("status", "page", "--json", "--url", store.url)
    doc = json.loads(status.stdout)
    expected = [_as_page_shows(e, "holding") for e in doc["holders"]]
    expected += [_as_page_shows(e, "waiting") for e in doc["waiters"]]
    assert [{k: v for k, v in row.items() if k != "age"} for row in rows] == expected
    assert [r["state"] for r in rows] == ["holding", "holding", "waiting", "waiting"]
    assert all(row["age"].endswith("s") for row in rows)
    exporter.stop()
    for permit in permits:
        permit.release()
    for thread in waiting:  # granted and released, before the harness closes backends
        thread.join(20)
    assert sorted(granted) == [1, 2]


def test_the_page_escapes_what_comes_from_the_store_and_says_what_it_could_not_read() -> None:
    entry = EntryStatus("k", "<script>alert(1)</script>", 1, 7, True, 0.0, (0,))
    page = status_page(
        {"a": (Status("a", 2, (entry,), ()), False), "b": (None, False)}, "x & y", 5, now=10.0
    )
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Semaphores at x &amp; y" in page
    assert '<meta http-equiv="refresh" content="5">' in page
    assert "stale: the last read failed" in page
    assert "not read (no such semaphore, or no answer)" in page
