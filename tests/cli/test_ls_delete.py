"""``ls``, ``delete`` and ``exporter --all``: the semaphores of a namespace, listed,
deleted (refused while in use, unless ``--force``) and exported as they come and go."""

from __future__ import annotations

import json

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Harness

from .conftest import Spawner, Store, assert_one_line_error, cli, wait_for
from .test_hold import Sidecar, sample

ZOOKEEPER_ONLY = pytest.mark.parametrize("service", ["zookeeper"], indirect=True)


@ZOOKEEPER_ONLY
def test_ls_lists_the_namespace_as_a_table_and_as_json(store: Store, service: Harness) -> None:
    empty = cli("ls", "--url", store.url)
    assert (empty.returncode, empty.stdout) == (0, ""), empty.stderr
    assert "no semaphores at" in empty.stderr
    backend = service.connect()
    backend.semaphore("render", capacity=8)
    backend.semaphore("db", capacity=2)
    table = cli("ls", "--url", store.url)
    assert table.returncode == 0, table.stderr
    assert table.stdout.split("\n") == [
        "NAME    CAPACITY",
        "db             2",
        "render         8",
        "",
    ]
    doc = cli("ls", "--json", "--url", store.url)
    assert json.loads(doc.stdout) == {
        "semaphores": [{"name": "db", "capacity": 2}, {"name": "render", "capacity": 8}]
    }


@ZOOKEEPER_ONLY
def test_delete_is_refused_while_in_use_unless_forced(store: Store, service: Harness) -> None:
    sem = service.connect().semaphore("busy", capacity=1)
    holder = sem.acquire()
    refused = cli("delete", "busy", "--url", store.url)
    assert refused.returncode == 73, refused.stderr
    assert_one_line_error(refused)
    assert "1 holder" in refused.stderr
    assert store.stored("busy")
    forced = cli("delete", "busy", "--force", "--url", store.url)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout == "deleted 'busy' and the entries of its 1 holder\n"
    assert not store.stored("busy")
    with pytest.raises(sr.PermitLost):  # the holder learns it at its next fenced write
        holder.transaction().commit()
    missing = cli("delete", "busy", "--url", store.url)
    assert missing.returncode == 66, missing.stderr
    service.connect().semaphore("idle", capacity=1)
    idle = cli("delete", "idle", "--url", store.url)
    assert (idle.returncode, idle.stdout) == (0, "deleted 'idle'\n"), idle.stderr
    assert not store.stored("idle")


@ZOOKEEPER_ONLY
def test_exporter_all_follows_the_semaphores_as_they_come_and_go(
    store: Store, service: Harness, spawn: Spawner
) -> None:
    for args in ((), ("x", "--all")):
        usage = cli("exporter", *args, "--url", store.url, "--listen", "127.0.0.1:0")
        assert usage.returncode == 64, usage.stderr
        assert_one_line_error(usage)
    backend = service.connect()
    backend.semaphore("first", capacity=2).acquire()
    exporter = Sidecar(
        spawn(
            "exporter", "--all", "--url", store.url, "--listen", "127.0.0.1:0",
            "--min-interval", "0",
        )
    )  # fmt: skip

    def exported() -> set[str]:
        return {
            dict(labels)["semaphore"]
            for (name, labels), _ in exporter.metrics().items()
            if name == "semaphore_recipes_status_up"
        }

    assert exported() == {"first"}
    assert sample(exporter.metrics(), "semaphore_recipes_permits_in_use", semaphore="first") == 1
    backend.semaphore("second", capacity=3)
    wait_for(lambda: exported() == {"first", "second"}, 10, "the new semaphore exported")
    backend.delete_semaphore("first")
    wait_for(lambda: exported() == {"second"}, 10, "the deleted semaphore gone")
    exporter.stop()
