"""``status``, ``watch`` and ``set-capacity`` against real servers."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from typing import Any

import pytest

from .conftest import CLI, Lines, Store, assert_one_line_error, clean_env, cli, wait_for


def test_status_json_lists_holders_and_waiters_in_queue_order(store: Store) -> None:
    holder_backend = store.service.connect(owner="holder-one")
    waiter_backend = store.service.connect(owner="waiter-two")
    sem = holder_backend.semaphore("pool", 2)
    held = sem.acquire(1)
    got: list[Any] = []
    waiter = threading.Thread(
        target=lambda: got.append(waiter_backend.semaphore("pool", 2).acquire(2, timeout=30))
    )
    waiter.start()
    try:
        wait_for(lambda: len(sem.status().waiters) == 1, 20, "the waiter to queue")
        started = time.time()
        result = cli("status", "pool", "--json", "--url", store.url)
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        assert (doc["name"], doc["capacity"], doc["used"], doc["free"]) == ("pool", 2, 1, 1)
        [h] = doc["holders"]
        [w] = doc["waiters"]
        assert (h["position"], h["owner"], h["permits"], h["token"]) == (
            1,
            "holder-one",
            1,
            held.token,
        )
        assert (w["position"], w["owner"], w["permits"]) == (2, "waiter-two", 2)
        assert w["token"] > h["token"]
        for entry in (h, w):
            assert 0 <= entry["age"] < 60
            assert entry["since"] <= started + 1
        table = cli("status", "pool", "--url", store.url)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].startswith("pool: capacity 2, 1 in use, 1 free; 1 holder, 1 waiter")
        assert "holding" in lines[2] and "holder-one" in lines[2] and str(held.token) in lines[2]
        assert "waiting" in lines[3] and "waiter-two" in lines[3]
    finally:
        held.release()
        waiter.join(30)
    assert got, "the waiter was never granted"
    got[0].release()


def test_status_of_a_missing_semaphore_exits_66_and_creates_nothing(store: Store) -> None:
    for args in (["status", "ghost", "--json"], ["set-capacity", "ghost", "3"]):
        result = cli(*args, "--url", store.url)
        assert result.returncode == 66, result.stderr
        assert_one_line_error(result)
        assert "no such semaphore 'ghost'" in result.stderr
    assert not store.stored("ghost")


def test_set_capacity_stores_the_new_capacity(store: Store) -> None:
    backend = store.service.connect()
    sem = backend.semaphore("cap", 2)
    result = cli("set-capacity", "cap", "5", "--url", store.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cap: capacity 2 -> 5"
    wait_for(lambda: sem.capacity == 5, 10, "the capacity watch to see 5")
    status = json.loads(cli("status", "cap", "--json", "--url", store.url).stdout)
    assert status["capacity"] == 5


@pytest.mark.parametrize("service", ["etcd"], indirect=True)
def test_watch_shows_changes_and_ends_cleanly_on_ctrl_c(store: Store) -> None:
    backend = store.service.connect(owner="watched")
    sem = backend.semaphore("live", 1)
    proc = subprocess.Popen(
        [*CLI, "watch", "live", "--json", "--interval", "0.1", "--url", store.url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    lines = Lines(proc)
    try:
        first = json.loads(lines.next(20))
        assert (first["exists"], first["used"], first["holders"]) == (True, 0, [])
        permit = sem.acquire()
        second = json.loads(lines.next(20))
        assert second["used"] == 1
        assert [h["owner"] for h in second["holders"]] == ["watched"]
        permit.release()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        err = proc.stderr.read() if proc.stderr is not None else ""
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
