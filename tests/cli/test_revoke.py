"""``revoke`` against real servers: ``run`` forwards it to its command (SIGTERM, then
SIGKILL after ``--grace``) and releases, ``hold`` turns unready and releases, and the
next waiter is granted; ``--force`` removes a holder that does not give back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.backend import Capability
from semaphore_recipes.cli._common import status_table
from semaphore_recipes.registry import backend_class

from .conftest import Spawner, Store, assert_one_line_error, cli, wait_for
from .test_hold import Hold, hold  # noqa: F401 (the fixture)

#: the stores whose backends revoke (the contract suite checks both faces on each); the
#: command line's own reactions are the same on every store: checked on one
REVOKING = pytest.mark.parametrize(
    "service", ["zookeeper", "etcd", "redis", "postgresql", "mysql"], indirect=True
)
ONE_STORE = pytest.mark.parametrize("service", ["etcd"], indirect=True)


def _revokes(store: Store) -> None:
    if not backend_class(store.kind).capabilities.has(Capability.REVOKE):
        pytest.skip(f"the {store.kind} backend cannot revoke")


def _holders(store: Store, name: str) -> list[dict[str, Any]]:
    """``status --json``'s holders."""
    shown = cli("status", name, "--json", "--url", store.url)
    assert shown.returncode == 0, shown.stderr
    holders: list[dict[str, Any]] = json.loads(shown.stdout)["holders"]
    return holders


@REVOKING
def test_run_forwards_a_revoke_as_sigterm_then_releases_to_the_waiter(
    store: Store, spawn: Spawner, tmp_path: Path
) -> None:
    _revokes(store)
    termed = tmp_path / "termed"
    child = f'trap "echo TERM > {termed}; exit 3" TERM; sleep 30 & wait'
    sem = store.service.connect().semaphore("rv", 1)
    first = spawn("run", "rv", "-c", "1", "--url", store.url, "--", "sh", "-c", child)
    wait_for(lambda: len(sem.status().holders) == 1, 20, "the run to hold")
    token = sem.status().holders[0].token
    second = spawn("run", "rv", "-c", "1", "-q", "--url", store.url, "--", "true")
    wait_for(lambda: len(sem.status().waiters) == 1, 20, "the second run to queue")
    revoked = cli("revoke", "rv", "--token", str(token), "--url", store.url)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.strip() == "rv: 1 holder(s) asked to release"
    assert first.wait(20) == 3, first.stderr()  # its command's status
    assert termed.read_text().strip() == "TERM"
    assert "revoked: sending SIGTERM" in first.stderr()
    assert second.wait(20) == 0, second.stderr()  # granted once the first released
    assert sem.status().holders == ()
    nobody = cli("revoke", "rv", "--token", str(token), "--url", store.url)
    assert nobody.returncode == 67, nobody.stderr
    assert_one_line_error(nobody)


@ONE_STORE
def test_run_kills_a_command_that_ignores_sigterm_after_its_grace(
    store: Store, spawn: Spawner
) -> None:
    _revokes(store)
    child = "trap '' TERM; exec sleep 30"
    sem = store.service.connect().semaphore("rv-kill", 1)
    run = spawn(
        "run", "rv-kill", "-c", "1", "--grace", "0.5", "--url", store.url, "--", "sh", "-c", child
    )
    wait_for(lambda: len(sem.status().holders) == 1, 20, "the run to hold")
    started = time.monotonic()
    revoked = cli("revoke", "rv-kill", "--all", "--url", store.url)
    assert revoked.returncode == 0, revoked.stderr
    assert run.wait(20) == 137, run.stderr()  # 128 + SIGKILL
    assert time.monotonic() - started < 10
    assert "SIGKILL" in run.stderr()
    assert _holders(store, "rv-kill") == []


@ONE_STORE
def test_hold_turns_unready_then_releases(
    store: Store,
    hold: Hold,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    _revokes(store)
    token_file = tmp_path / "t.env"
    side = hold(store.url, "rv-hold", "-c", "1", "--grace", "5", "--token-file", str(token_file))
    side.wait_state("held")
    owner = side.status()["owner"]
    assert isinstance(owner, str)
    revoked = cli("revoke", "rv-hold", "--owner", owner, "--url", store.url)
    assert revoked.returncode == 0, revoked.stderr
    side.wait_state("revoked", 10)
    assert not token_file.exists()
    shown = _holders(store, "rv-hold")  # still held for its grace, shown as revoked
    assert [h["revoke_requested"] for h in shown] == [True]
    table = status_table(store.service.connect().semaphore("rv-hold", 1).status())
    assert table[-1].split()[1] == "revoked", table
    assert side.spawned.wait(20) == 0, side.spawned.stderr()
    assert "hold: released 'rv-hold'" in side.spawned.stderr()
    assert _holders(store, "rv-hold") == []


@ONE_STORE
def test_force_removes_a_holder_that_keeps_its_permit(store: Store) -> None:
    _revokes(store)
    client = store.service.connect()
    stubborn = client.semaphore("rv-force", 1).acquire()  # not watching: never told
    forced = cli("revoke", "rv-force", "--all", "--force", "--grace", "0.2", "--url", store.url)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.strip() == "rv-force: 1 holder(s) asked to release; 1 removed after 0.2 s"
    assert _holders(store, "rv-force") == []
    with pytest.raises(sr.PermitLost):
        stubborn.transaction().create(client.data_key("rv-force"), b"late").commit()


@ONE_STORE
def test_usage_and_missing_semaphore(store: Store) -> None:
    usage = cli("revoke", "rv-none", "--url", store.url)
    assert usage.returncode == 64
    both = cli("revoke", "rv-none", "--all", "--token", "3", "--url", store.url)
    assert both.returncode == 64
    negative = cli("revoke", "rv-none", "--all", "--grace", "-1", "--url", store.url)
    assert negative.returncode == 64
    missing = cli("revoke", "rv-none", "--all", "--url", store.url)
    assert missing.returncode == 66, missing.stderr
    assert not store.stored("rv-none")
