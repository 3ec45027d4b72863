"""What a new user types and trips on: global options in either place, a NAME starting
with ``-``, ``--adopt-capacity`` alone, ``status --json`` of a missing name, a Redis
database the server does not have."""

from __future__ import annotations

import json

import pytest

from .conftest import Store, assert_one_line_error, cli

ETCD_ONLY = pytest.mark.parametrize("service", ["etcd"], indirect=True)


@ETCD_ONLY
def test_global_options_go_before_or_after_the_subcommand(store: Store) -> None:
    store.service.connect().semaphore("places", 2)
    for args in (
        ["--url", store.url, "-v", "run", "places", "-c", "2", "--", "true"],
        ["-u", store.url, "run", "places", "-v", "-c", "2", "--", "true"],
        ["-v", "run", "places", "-c", "2", "--url", store.url, "--", "true"],
    ):
        result = cli(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "INFO" in result.stderr, args  # -v counted wherever it is
    result = cli("--url", store.url, "status", "places")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("places: capacity 2")
    # the subcommand's own --url wins over the one before it
    wrong = "etcd://127.0.0.1:1"
    result = cli("--url", wrong, "status", "places", "--url", store.url)
    assert result.returncode == 0, result.stderr


@ETCD_ONLY
def test_a_name_starting_with_a_dash_is_reachable(store: Store) -> None:
    result = cli("run", "--name=-x", "-c", "2", "--url", store.url, "--", "true")
    assert result.returncode == 0, result.stderr
    assert store.stored("-x")
    for args in (["status", "--", "-x"], ["status", "--name=-x"]):
        result = cli(*args[:1], "--url", store.url, *args[1:])
        assert result.returncode == 0, (args, result.stderr)
        assert result.stdout.startswith("-x: capacity 2"), result.stdout
    result = cli("set-capacity", "--url", store.url, "--", "-x", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "-x: capacity 2 -> 3"
    result = cli("set-capacity", "--name=-x", "4", "--url", store.url)
    assert result.returncode == 0, result.stderr
    for args in (["status", "--url", store.url], ["status", "a", "--name=b", "--url", store.url]):
        result = cli(*args)
        assert result.returncode == 64, (args, result.stderr)
        assert_one_line_error(result)
        assert "NAME" in result.stderr


@ETCD_ONLY
def test_run_adopt_capacity_needs_no_capacity(store: Store) -> None:
    store.service.connect().semaphore("adopted", 3)
    script = 'test "$SEMAPHORE_RECIPES_PERMITS" = 2'
    adopting = ["--adopt-capacity", "-p", "2", "--url", store.url]
    result = cli("run", "adopted", *adopting, "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    # without --capacity nothing can be created: the semaphore must exist
    result = cli("run", "unmade", "--adopt-capacity", "--url", store.url, "--", "true")
    assert result.returncode == 66, result.stderr
    assert_one_line_error(result)
    assert not store.stored("unmade")
    # neither: a usage error before any I/O
    result = cli("run", "unmade", "--url", store.url, "--", "true")
    assert result.returncode == 64, result.stderr
    assert_one_line_error(result)
    assert "--capacity" in result.stderr


@ETCD_ONLY
def test_status_json_of_a_missing_name_prints_a_document_and_exits_66(store: Store) -> None:
    result = cli("status", "nowhere", "--json", "--url", store.url)
    assert result.returncode == 66, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["name"], doc["exists"]) == ("nowhere", False)
    assert_one_line_error(result)  # and the message, on stderr
    store.service.connect().semaphore("somewhere", 1)
    doc = json.loads(cli("status", "somewhere", "--json", "--url", store.url).stdout)
    assert (doc["name"], doc["exists"], doc["capacity"]) == ("somewhere", True, 1)


@pytest.mark.parametrize("service", ["redis"], indirect=True)
def test_a_redis_database_the_server_lacks_is_a_usage_error(store: Store) -> None:
    url = store.url.replace("/0?", "/99?", 1)
    assert url != store.url
    result = cli("status", "x", "--url", url)
    assert result.returncode == 64, result.stderr
    assert_one_line_error(result)
    assert "database number is out of this server's range" in result.stderr
