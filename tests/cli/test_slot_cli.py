"""``--slot`` of ``run`` and ``hold``, and the slots in ``status`` (issue 16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import semaphore_recipes as sr

from .conftest import Store, assert_one_line_error, cli
from .test_hold import Hold, hold, token_env  # noqa: F401

BOTH = pytest.mark.parametrize("service", ["zookeeper", "etcd", "redis"], indirect=True)


@BOTH
def test_run_slot_exports_the_slots_and_status_shows_them(store: Store, tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    with sr.connect(store.url) as backend:
        sem = backend.semaphore("shard", capacity=3)
        with sem.acquire(slot=True) as first:
            assert [s.index for s in first.slots] == [0]
            table = cli("status", "shard", "--url", store.url)
            assert table.returncode == 0, table.stderr
            assert "SLOTS" in table.stdout and "  0  " in table.stdout
            doc = json.loads(cli("status", "shard", "--json", "--url", store.url).stdout)
            assert [h["slots"] for h in doc["holders"]] == [[0]]
            result = cli(
                "run",
                "shard",
                "-c",
                "3",
                "-p",
                "2",
                "--slot",
                "--url",
                store.url,
                "--",
                "sh",
                "-c",
                f'env | grep ^SEMAPHORE_RECIPES_SLOT > "{env_file}"',
            )
            assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert env["SEMAPHORE_RECIPES_SLOT"] == "1,2"
    tokens = [int(t) for t in env["SEMAPHORE_RECIPES_SLOT_TOKEN"].split(",")]
    assert len(tokens) == 2 and tokens[0] > first.slots[0].token
    assert store.entries("shard") == []  # the entries and their slot records


@BOTH
def test_hold_slot_writes_the_slots_to_the_token_file_and_status(
    store: Store,
    hold: Hold,  # noqa: F811  (the fixture of test_hold.py)
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "t.env"
    side = hold(store.url, "gpus", "-c", "2", "--slot", "--token-file", str(token_file))
    side.wait_state("held")
    env = token_env(token_file)
    assert env["SEMAPHORE_RECIPES_SLOT"] == "0"
    doc = side.status()
    assert doc["slots"] == [0] and doc["slot_tokens"] == [int(env["SEMAPHORE_RECIPES_SLOT_TOKEN"])]
    side.stop()
    assert store.entries("gpus") == []


@pytest.mark.parametrize("service", ["etcd"], indirect=True)
def test_slot_with_also_is_a_usage_error(store: Store) -> None:
    result = cli("run", "a", "-c", "1", "--slot", "--also", "b:1", "--url", store.url, "--", "true")
    assert result.returncode == 64
    assert_one_line_error(result)
    assert "--also" in result.stderr
    assert not store.stored("a")  # before any I/O
