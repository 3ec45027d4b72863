"""The CLI with restricted users: ``status``, ``ls``, ``watch`` and ``exporter`` need only read
permission; a refusal exits 77 (EX_NOPERM) with one line naming the user."""

from __future__ import annotations

import json
import signal
import urllib.request

from ..secured import READER, SecuredStore
from .conftest import Spawner, assert_one_line_error, cli, listening_address, wait_for


def test_status_with_read_only_credentials(secured: SecuredStore) -> None:
    held = secured.writer().semaphore("pool", 2).acquire()
    try:
        result = cli("status", "pool", "--json", "--url", secured.reader_url)
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        assert (doc["capacity"], doc["used"]) == (2, 1)
        assert [h["token"] for h in doc["holders"]] == [held.token]
        listed = cli("ls", "--json", "--url", secured.reader_url)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"semaphores": [{"name": "pool", "capacity": 2}]}
    finally:
        held.release()


def test_run_with_read_only_credentials_exits_77(secured: SecuredStore) -> None:
    secured.writer().semaphore("pool", 2)
    for args in (["run", "pool", "-c", "2"], ["run", "new", "-c", "2"]):
        result = cli(*args, "--url", secured.reader_url, "--", "true")
        assert result.returncode == 77, result.stderr
        assert_one_line_error(result)
        assert f"'{READER[0]}'" in result.stderr
    result = cli("set-capacity", "pool", "3", "--url", secured.reader_url)
    assert result.returncode == 77, result.stderr
    assert_one_line_error(result)
    assert secured.where("pool") in result.stderr
    assert secured.entries("pool") == 0
    assert not secured.stored("new")


def test_status_of_a_missing_semaphore_as_a_reader_exits_66(secured: SecuredStore) -> None:
    result = cli("status", "ghost", "--url", secured.reader_url)
    assert result.returncode == 66, result.stderr
    assert_one_line_error(result)
    assert "no such semaphore 'ghost'" in result.stderr
    assert not secured.stored("ghost")


def test_wrong_password_exits_77(secured: SecuredStore) -> None:
    secured.writer().semaphore("pool", 2)
    result = cli("status", "pool", "--url", secured.url_for(READER[0], "bad-pw-x9"))
    assert result.returncode == 77, result.stderr
    assert_one_line_error(result)
    assert f"'{READER[0]}'" in result.stderr
    assert "bad-pw-x9" not in result.stderr  # the password is never shown


def test_watch_and_exporter_with_read_only_credentials(
    secured: SecuredStore, spawn: Spawner
) -> None:
    """The monitoring commands need only read: ``watch`` shows the holder, the
    exporter's scrape reports the semaphore up with its use; the reader leaves no
    trace in the store."""
    held = secured.writer().semaphore("pool", 2).acquire()
    try:
        watcher = spawn("watch", "pool", "--json", "--interval", "0.2", "--url", secured.reader_url)
        exporter = spawn("exporter", "pool", "--listen", "127.0.0.1:0", "--url", secured.reader_url)
        wait_for(lambda: '"used":1' in watcher.stdout().replace(" ", ""), 30, "watch's line")
        doc = json.loads(watcher.stdout().splitlines()[0])
        assert [h["token"] for h in doc["holders"]] == [held.token]
        address = listening_address(exporter, "the exporter to listen")
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            metrics = reply.read().decode()
        assert 'semaphore_recipes_status_up{semaphore="pool"} 1.0' in metrics, metrics
        assert 'semaphore_recipes_permits_in_use{semaphore="pool"} 1.0' in metrics, metrics
        for spawned in (watcher, exporter):
            spawned.proc.send_signal(signal.SIGINT)
            assert spawned.wait(15) == 0, spawned.stderr()
            assert "refused" not in spawned.stderr(), spawned.stderr()
        assert secured.entries("pool") == 1  # the writer's
    finally:
        held.release()
