"""The history across Sentinel failovers (chaos/history_sentinel.py): the epochs' AOF
commands stitched on crafted sequences, then once on a real Sentinel set, with a write
lost on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos import history_redis, history_sentinel
from chaos.history_sentinel import EpochLog, stitch

LAYOUT = history_redis.RedisLayout("p", "s", "/chaos-data", "/chaos-marker", "/clock")


def cmd(*parts: str) -> list[bytes]:
    return [part.encode() for part in parts]


def tick(n: int) -> list[bytes]:
    return cmd("SET", "/clock", str(n))


def test_one_epoch_is_its_commands_without_select_multi_exec() -> None:
    out = stitch([EpochLog("a", [cmd("SELECT", "0"), cmd("MULTI"), tick(1), cmd("EXEC")])])
    assert out.commands == [tick(1)] and out.lost == [] and out.problems == []


def test_a_new_primary_that_had_everything_carries_on() -> None:
    first = [tick(1), cmd("SET", "x", "1"), tick(2), cmd("SET", "x", "2")]
    # it synced at the start: all of the old primary's commands, then its own
    second = [cmd("SELECT", "0"), *first, tick(3), cmd("SET", "x", "3")]
    out = stitch([EpochLog("a", first), EpochLog("b", second)])
    assert out.commands == [*first, tick(3), cmd("SET", "x", "3")]
    assert out.lost == [] and out.problems == []


def test_what_the_new_primary_lacked_is_lost() -> None:
    first = [tick(1), cmd("SET", "x", "1"), tick(2), cmd("SET", "x", "2"), tick(3)]
    second = [tick(1), cmd("SET", "x", "1"), tick(4), cmd("SET", "y", "1")]
    out = stitch([EpochLog("a", first), EpochLog("b", second)])
    assert out.commands == [tick(1), cmd("SET", "x", "1"), tick(4), cmd("SET", "y", "1")]
    assert out.lost == [(2, [tick(2), cmd("SET", "x", "2"), tick(3)])]


def test_a_resynced_node_starts_where_it_synced_and_its_base_is_ignored() -> None:
    first = [tick(1), cmd("SET", "x", "1"), tick(2)]
    second = [*first, tick(3), cmd("SET", "x", "2"), tick(4), cmd("SET", "x", "3")]
    # node a rejoined and fully resynced at tick 3: its AOF starts after the snapshot
    third = [tick(4), cmd("SET", "x", "3"), tick(5)]
    out = stitch(
        [EpochLog("a", first), EpochLog("b", second), EpochLog("a", third, base_has_data=True)]
    )
    assert out.commands == [*second, tick(5)]
    assert out.lost == [] and out.problems == []


def test_the_latest_of_equal_places_and_the_longest_run_win() -> None:
    history = [cmd("INCR", "n"), tick(1), cmd("INCR", "n"), tick(2), cmd("INCR", "n")]
    assert history_sentinel.place(history, [cmd("INCR", "n"), tick(2)]) == (2, 2)
    assert history_sentinel.place(history, [cmd("INCR", "n")]) == (4, 1)
    assert history_sentinel.place(history, [cmd("INCR", "m")]) is None


def test_an_epoch_that_cannot_be_placed_is_a_problem() -> None:
    out = stitch([EpochLog("a", [tick(1)]), EpochLog("b", [tick(9)], base_has_data=True)])
    assert out.commands == [tick(1), tick(9)]
    assert len(out.problems) == 1 and "base file holds data" in out.problems[0]
    assert "base file" in stitch([EpochLog("a", [tick(1)], base_has_data=True)]).problems[0]


def test_a_segment_is_its_base_and_the_incremental_files_before_the_next(
    tmp_path: Path,
) -> None:
    """(``aof-disable-auto-gc yes``: a rewrite keeps the files it replaced, as history.)"""
    (tmp_path / "a.manifest").write_text(
        "file a.3.base.rdb seq 3 type b\nfile a.2.incr.aof seq 2 type h\n"
        "file a.2.base.rdb seq 2 type h\nfile a.1.incr.aof seq 1 type h\n"
        "file a.1.base.rdb seq 1 type h\nfile a.3.incr.aof seq 3 type i\n"
    )
    for name, size in (("a.1.base.rdb", 90), ("a.2.base.rdb", 900), ("a.3.base.rdb", 900)):
        (tmp_path / name).write_bytes(b"x" * size)
    assert history_sentinel.current_segment(tmp_path) == 3
    assert history_sentinel.segment(tmp_path, 1) == ([tmp_path / "a.1.incr.aof"], False, [])
    assert history_sentinel.segment(tmp_path, 2) == ([tmp_path / "a.2.incr.aof"], True, [])
    assert history_sentinel.segment(tmp_path, 3)[0] == [tmp_path / "a.3.incr.aof"]
    assert "no AOF base file 4" in history_sentinel.segment(tmp_path, 4)[2][0]


def test_lost_commands_by_kind_and_lost_grants() -> None:
    waiting = json.dumps({"w": 1, "l": "ab", "o": "c", "h": False, "t": 7})
    held = json.dumps({"w": 1, "l": "ab", "o": "c", "h": True, "t": 7})
    lost = [
        cmd("HSET", "p:s:s:e", "ab.1", waiting),
        cmd("HSET", "p:s:s:e", "ab.1", held),
        cmd("SET", "/chaos-data", "{}"),
        tick(1),
        cmd("PEXPIRE", "p:lease:ab", "2000"),
        cmd("INCR", "p:seq"),
    ]
    assert dict(history_sentinel.lost_kinds(lost, LAYOUT)) == {
        "entry": 1, "grant": 1, "fenced write": 1, "clock tick": 1, "lease pexpire": 1,
        "incr": 1,
    }  # fmt: skip
    assert history_sentinel.lost_grants(lost, LAYOUT) == {("ab.1", 7)}


@pytest.mark.slow
def test_a_real_sentinel_set_is_stitched_across_two_failovers(tmp_path: Path) -> None:
    """Writes, the primary killed (one write its replica never got: the replication
    link black-holed), the killed node rejoins (a full resync: a new AOF segment), writes,
    the new primary killed, rejoins, writes: the stitched history of the epochs'
    segments (as chaos/cluster_redis_sentinel.py keeps them) is every write but the lost
    one, which shows as lost."""
    import redis

    from semaphore_recipes.devtools.redis_sentinel import RedisSentinelSet
    from semaphore_recipes.devtools.redis_server import RedisServer
    from semaphore_recipes.testing.proxy import FaultProxy

    from ..conftest import wait_until

    # the first replication through a proxy; a long failover timeout, or the sentinels
    # point the replica at the primary itself; no failover but the test's on a loaded
    # machine (a node slow to answer for a second)
    sentinel_set = RedisSentinelSet(
        workdir=tmp_path / "set", failover_timeout_ms=60_000, down_after_ms=3000,
        persistent=True,
        node_args=("--auto-aof-rewrite-percentage", "0", "--aof-disable-auto-gc", "yes"),
    )  # fmt: skip
    proxy = FaultProxy(sentinel_set.nodes[0].host_port).start()
    sentinel_set.nodes[1].replica_of = proxy.address
    epochs: list[tuple[RedisServer, int | None]] = []

    def aof(node: RedisServer) -> Path:
        return Path(node.workdir) / "appendonlydir"

    def promoted(node: RedisServer) -> None:
        epochs.append((node, history_sentinel.current_segment(aof(node))))

    def write(n: int) -> None:
        with redis.Redis(port=sentinel_set.primary().port, socket_timeout=5) as client:
            client.set(f"k{n}", f"v{n}")

    def fail_over() -> None:
        old = sentinel_set.kill_primary()
        promoted(sentinel_set.wait_for_new_primary(old))
        sentinel_set.rejoin(old)

    with proxy, sentinel_set.start():
        promoted(sentinel_set.primary())
        for n in range(3):
            write(n)
        wait_until(sentinel_set.replicated, timeout=10)
        proxy.blackhole()
        write(99)  # acknowledged by the primary alone
        fail_over()
        for n in range(3, 6):
            write(n)
        wait_until(sentinel_set.replicated, timeout=10)
        fail_over()
        for n in range(6, 9):
            write(n)
        assert sentinel_set.primary() is epochs[-1][0]
        sentinel_set.stop()

    logs = []
    for node, base in epochs:
        assert base is not None
        files, base_has_data, problems = history_sentinel.segment(aof(node), base)
        assert problems == []
        logs.append(EpochLog(str(node.port), list(history_redis.read_commands(files)),
                             base_has_data))  # fmt: skip
    assert [node for node, _ in epochs] == [*sentinel_set.nodes, sentinel_set.nodes[0]]
    assert epochs[2][1] != epochs[0][1]  # node 0 resynced in between: a new segment
    out = stitch(logs)
    assert out.problems == []
    assert out.commands == [cmd("SET", f"k{n}", f"v{n}") for n in range(9)]
    assert out.lost == [(2, [cmd("SET", "k99", "v99")])]
