"""The history readers on hand-made input: ZooKeeper's binary log format (padding,
multi, failed multi, closeSession), etcd's watch events (lease ends, the clock),
PostgreSQL's test_decoding text (grants, session ends), mariadb-binlog's text; and a real
Redis AOF."""

from __future__ import annotations

import datetime
import json
import struct
import time
from pathlib import Path

from chaos import history_etcd, history_zk
from chaos.model import (
    CapacitySet,
    DeleteCause,
    EntryCreated,
    EntryDeleted,
    EntryGranted,
    FencedWrite,
    Marker,
)

SEM = "/semaphore_recipes/chaos"
LAYOUT = history_zk.ZkLayout(SEM, "/chaos-data", "/chaos-marker")
ENTRY = "e-" + "a" * 32 + "-w2-0000000001"


def jstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">i", len(raw)) + raw


def create(path: str, data: bytes, ephemeral: bool) -> bytes:
    acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jstr("world") + jstr("anyone")
    return jstr(path) + jstr(data) + acl + struct.pack(">bi", ephemeral, 1)


def record(session: int, zxid: int, type_: int, body: bytes, time_ms: int = 5000) -> bytes:
    txn = struct.pack(">qiqqi", session, 1, zxid, time_ms, type_) + body
    return struct.pack(">qi", 0, len(txn)) + txn + b"B"


def multi(*ops: tuple[int, bytes]) -> bytes:
    return struct.pack(">i", len(ops)) + b"".join(struct.pack(">i", t) + jstr(b) for t, b in ops)


def write_log(path: Path, records: list[bytes]) -> None:
    header = b"ZKLG" + struct.pack(">iq", 2, 0)
    path.mkdir(parents=True)
    (path / "log.1").write_bytes(header + b"".join(records) + bytes(4096))  # preallocation


def test_zookeeper_logs_are_read_and_normalized(tmp_path: Path) -> None:
    value = json.dumps({"writer": "c0.0/t0", "key": ENTRY, "token": 3}).encode()
    fence = (13, jstr(f"{SEM}/{ENTRY}") + struct.pack(">i", -1))
    records = [
        record(0, 1, -10, struct.pack(">i", 2000)),
        record(9, 2, 1, create(SEM, b'{"capacity":3}', False)),
        record(
            9, 3, 15, create(f"{SEM}/{ENTRY}", b'{"owner":"c0.0","held":false,"since":1}', True)
        ),
        record(
            9, 4, 14, multi(fence, (5, jstr("/chaos-data") + jstr(value) + struct.pack(">i", -1)))
        ),
        # a failed multi: its parts are error txns
        record(9, 5, 14, multi((-1, struct.pack(">i", -101)), (-1, struct.pack(">i", -2)))),
        record(9, 6, 5, jstr(SEM) + jstr(b'{"capacity":5}') + struct.pack(">i", 0)),
        record(9, 7, -11, b""),  # the session ends: its ephemeral goes
        record(0, 8, 5, jstr("/chaos-marker") + jstr(b"end") + struct.pack(">i", 0)),
    ]
    # two members: one has the whole log, the other a prefix of it
    write_log(tmp_path / "m1" / "version-2", records)
    write_log(tmp_path / "m2" / "version-2", records[:3])
    txns, conflicts = history_zk.read_logs([tmp_path / "m1", tmp_path / "m2"])
    assert conflicts == [] and [t.zxid for t in txns] == list(range(1, 9))
    assert history_zk.normalize(txns, LAYOUT) == [
        CapacitySet(2, 5.0, 3),
        EntryCreated(3, 5.0, ENTRY, 3, 2, "c0.0", 9),
        FencedWrite(4, 5.0, ENTRY, 3, "c0.0/t0"),
        CapacitySet(6, 5.0, 5),
        EntryDeleted(7, 5.0, ENTRY, 3, DeleteCause.SESSION_END),
        Marker(8, 5.0, "end"),
    ]


def test_a_record_cut_short_ends_the_read(tmp_path: Path) -> None:
    good = record(0, 1, 5, jstr("/chaos-marker") + jstr(b"x") + struct.pack(">i", 0))
    header = b"ZKLG" + struct.pack(">iq", 2, 0)
    (tmp_path / "log.1").write_bytes(header + good + good[:-5])
    assert [t.zxid for t in history_zk.read_log_file(tmp_path / "log.1")] == [1]


ETCD = history_etcd.EtcdLayout(
    entries_prefix=b"/s/chaos/entries/",
    config_key=b"/s/chaos/config",
    data_key=b"/chaos-data",
    marker_key=b"/chaos-marker",
    clock_key=b"/chaos-clock",
)


def ev(
    deleted: bool, key: bytes, value: bytes, create: int, mod: int, lease: int = 0
) -> history_etcd.RawEvent:
    return history_etcd.RawEvent(deleted, key, value, create, mod, lease)


def test_etcd_events_are_normalized() -> None:
    entry = b'{"owner":"c0.0","held":false,"since":1,"w":2}'
    write = json.dumps({"writer": "c0.0/t1", "key": "1-0", "token": 4}).encode()
    raw = [
        ev(False, b"/chaos-clock", b"100.5", 1, 2),
        ev(False, b"/s/chaos/config", b'{"capacity":3}', 3, 3),
        ev(False, b"/s/chaos/entries/1-0", entry, 4, 4, lease=1),
        ev(False, b"/s/chaos/entries/1-1", entry, 5, 5, lease=1),
        ev(False, b"/s/chaos/entries/1-0", entry.replace(b"false", b"true"), 4, 6, lease=1),
        ev(False, b"/chaos-data", write, 7, 7),
        ev(False, b"/chaos-clock", b"101.5", 1, 8),
        ev(True, b"/s/chaos/entries/1-0", entry, 4, 9, lease=1),  # the lease ended:
        ev(True, b"/s/chaos/entries/1-1", entry, 5, 9, lease=1),  # both keys, one revision
        ev(False, b"/chaos-clock", b"101.7", 1, 10),
        ev(False, b"/chaos-marker", b"quiesced", 11, 11),  # the ticks stopped: no time
        ev(False, b"/chaos-clock", b"103.7", 1, 12),
    ]
    assert history_etcd.normalize(raw, ETCD) == [
        CapacitySet(3, 100.5, 3),
        EntryCreated(4, 100.5, "1-0", 4, 2, "c0.0", 1),
        EntryCreated(5, 100.5, "1-1", 5, 2, "c0.0", 1),
        FencedWrite(7, 100.5, "1-0", 4, "c0.0/t1"),
        EntryDeleted(9, 101.5, "1-0", 4, DeleteCause.SESSION_END),
        EntryDeleted(9, 101.5, "1-1", 5, DeleteCause.SESSION_END),
        Marker(11, None, "quiesced"),
    ]


def test_a_redis_aof_is_read_and_normalized(tmp_path: Path) -> None:
    """A real persistent server's AOF: script effects, a lease's expiry (the DEL the
    server writes) ending its entries, a removal, the capacity, fences, markers, ticks."""
    import redis

    from chaos import history_redis
    from semaphore_recipes.devtools.redis_server import RedisServer

    layout = history_redis.RedisLayout("p", "s", "/chaos-data", "/chaos-marker", "/clock")
    entries, config = "p:s:s:e", "p:s:s:cfg"

    def entry(order: int, lease: str) -> str:
        return json.dumps({"w": 2, "l": lease, "o": f"own-{lease}", "h": False, "t": order})

    server = RedisServer(workdir=tmp_path / "redis", persistent=True)
    server.start(timeout=30)
    host, port = server.host_port.rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port))
    try:
        client.set("/clock", json.dumps(100.0))
        held = entry(2, "0a").replace("false", "true")  # (x.1's held mark: not a creation)
        client.eval(
            "redis.call('hset', KEYS[1], 'capacity', 3, 'version', 1)"
            " redis.call('hset', KEYS[2], 'x.1', ARGV[1])"
            " redis.call('hset', KEYS[2], 'y.2', ARGV[2])"
            " redis.call('hset', KEYS[2], 'x.1', ARGV[3]) return 1",
            2, config, entries, entry(2, "0a"), entry(3, "0b"), held,
        )  # fmt: skip
        client.set("p:lease:0a", "own", px=50)
        client.set("/chaos-data", json.dumps({"writer": "w", "key": "x.1", "token": 2}))
        client.set("/clock", json.dumps(100.2))
        deadline = time.monotonic() + 10.0
        while client.exists("p:lease:0a"):  # (its expiry: the server writes DEL)
            assert time.monotonic() < deadline, "the lease key never expired"
            time.sleep(0.01)
        client.hdel(entries, "y.2")
        client.set("/chaos-marker", "end")
        client.set("/clock", json.dumps(100.4))
    finally:
        client.close()
        server.stop()
        server.close()
    files, problems = history_redis.aof_files(tmp_path / "redis" / "appendonlydir")
    assert files and problems == []
    events = history_redis.normalize(history_redis.read_commands(files), layout)
    kinds = [(type(e).__name__, getattr(e, "key", getattr(e, "name", None))) for e in events]
    assert kinds == [
        ("CapacitySet", None), ("EntryCreated", "x.1"), ("EntryCreated", "y.2"),
        ("FencedWrite", "x.1"), ("EntryDeleted", "x.1"), ("EntryDeleted", "y.2"),
        ("Marker", "end"),
    ]  # fmt: skip
    created = events[1]
    assert isinstance(created, EntryCreated)
    assert (created.token, created.weight, created.owner, created.session) == (2, 2, "own-0a", 10)
    assert created.time == 100.0
    lease_end, removal = events[4], events[5]
    assert isinstance(lease_end, EntryDeleted) and lease_end.cause is DeleteCause.SESSION_END
    assert isinstance(removal, EntryDeleted) and removal.cause is DeleteCause.DELETE
    assert isinstance(events[0], CapacitySet) and events[0].capacity == 3
    assert isinstance(events[3], FencedWrite) and events[3].token == 2
    assert isinstance(events[6], Marker)


def test_postgresql_changes_are_parsed_and_normalized() -> None:
    """test_decoding's text: an enqueue, the server's grant (an UPDATE with the old row
    first), a fenced write, a removal, an entry swept with its expired session, a marker."""
    from chaos import history_postgresql

    layout = history_postgresql.PostgreSQLLayout("k", "s", "/chaos-data", "/chaos-marker")

    def entry(eid: str, session: str, token: int, held: str) -> str:
        return (
            f"semaphore[text]:'s' id[text]:'{eid}' session[text]:'{session}' "
            f"owner[text]:'it''s' weight[integer]:2 token[bigint]:{token} "
            f"held[boolean]:{held} since[double precision]:1.5"
        )

    def data(key: str, value: bytes) -> str:
        return f"table k.data: UPDATE: key[text]:'{key}' value[bytea]:'\\x{value.hex()}'"

    session = "id[text]:'{0}' owner[text]:'o' timeout_ms[integer]:2000 expires_at[timestamp "
    session += "with time zone]:'{1}'"
    fence = json.dumps({"writer": "w", "key": "a.0", "token": 2}).encode()
    lines = [
        "BEGIN",
        "table k.sessions: INSERT: " + session.format("0a", "2026-01-01 00:00:02+00"),
        "table k.sessions: INSERT: " + session.format("0b", "2026-01-01 00:00:02+00"),
        "table k.semaphores: INSERT: name[text]:'s' capacity[integer]:3 version[bigint]:1",
        "COMMIT (at 2026-01-01 00:00:00.5+00)",
        "BEGIN",
        "table k.entries: INSERT: " + entry("a.0", "0a", 2, "false"),
        "table k.entries: UPDATE: old-key: "
        + entry("a.0", "0a", 2, "false")
        + " new-tuple: "
        + entry("a.0", "0a", 2, "true"),
        "table k.entries: INSERT: " + entry("b.0", "0b", 3, "false"),
        "table k.entries: INSERT: semaphore[text]:'other' id[text]:'c.0' session[text]:'0b'",
        "COMMIT (at 2026-01-01 00:00:01+00)",
        "BEGIN",
        data("/chaos-data", fence),
        "COMMIT (at 2026-01-01 00:00:01.25+00)",
        "BEGIN",  # never committed: not in the output (test_decoding shows commits only)
        "BEGIN",
        "table k.sessions: UPDATE: " + session.format("0b", "-infinity"),
        "table k.entries: DELETE: " + entry("b.0", "0b", 3, "false"),
        "table k.entries: DELETE: " + entry("a.0", "0a", 2, "true"),
        "table k.sessions: DELETE: id[text]:'0b'",
        data("/chaos-marker", b"end"),
        "COMMIT (at 2026-01-01 00:00:01.5+00)",
    ]
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
    events = history_postgresql.normalize(history_postgresql.parse(lines), layout)
    assert events == [
        CapacitySet(2, t0 + 0.5, 3),
        EntryCreated(3, t0 + 1, "a.0", 2, 2, "it's", 10),
        EntryGranted(4, t0 + 1, "a.0", 2),
        EntryCreated(5, t0 + 1, "b.0", 3, 2, "it's", 11),
        FencedWrite(7, t0 + 1.25, "a.0", 2, "w"),
        EntryDeleted(9, t0 + 1.5, "b.0", 3, DeleteCause.SESSION_END),
        EntryDeleted(10, t0 + 1.5, "a.0", 2, DeleteCause.DELETE),
        Marker(12, t0 + 1.5, "end"),
    ]


# mariadb-binlog --base64-output=DECODE-ROWS --verbose output, captured from a test
# server and trimmed (Annotate_rows, sr_tokens rows and some header tails left out)
MARIADB_BINLOG = """\
#261128 12:09:14 server id 1  end_log_pos 44069 CRC32 0xce69f0e7 	GTID 0-1-69 trans
/*M!100001 SET @@session.gtid_seq_no=69*//*!*/;
START TRANSACTION
#261128 12:09:14 server id 1  end_log_pos 45077 CRC32 0x998a661e 	Table_map: `chaos`.`sr_sessions`
### INSERT INTO `chaos`.`sr_sessions`
### SET
###   @1='c215123e946ec011'
###   @2='o1'
###   @3=2000
###   @4=666
###   @5='2026-11-28 12:09:16.638646'
###   @6='2026-11-28 12:09:14.638654'
### INSERT INTO `chaos`.`sr_sessions`
### SET
###   @1='4e95466e83867cbf'
###   @2='o2'
###   @3=2000
###   @4=666
###   @5='2026-11-28 12:09:16.769682'
###   @6='2026-11-28 12:09:14.769688'
### INSERT INTO `chaos`.`sr_semaphores`
### SET
###   @1='chaos'
###   @2=2
###   @3=1
###   @4=0
###   @5=0
###   @6=0
# Number of rows: 3
#261128 12:09:14 server id 1  end_log_pos 45108 CRC32 0xf240da28 	Xid = 113
COMMIT/*!*/;
#261128 12:09:14 server id 1  end_log_pos 48041 CRC32 0x6efb46c4 	GTID 0-1-75 trans
START TRANSACTION
#261128 12:09:14 server id 1  end_log_pos 47638 CRC32 0x99a8a01b 	Write_rows: table id 26
### INSERT INTO `chaos`.`sr_entries`
### SET
###   @1='chaos'
###   @2='c215123e946ec011.0'
###   @3='c215123e946ec011'
###   @4='o1'
###   @5=2
###   @6=2
###   @7=1
###   @8=1795867754.9730610847
### INSERT INTO `chaos`.`sr_entries`
### SET
###   @1='chaos'
###   @2='4e95466e83867cbf.0'
###   @3='4e95466e83867cbf'
###   @4='o2'
###   @5=1
###   @6=3
###   @7=0
###   @8=1795867754.9772269726
### UPDATE `chaos`.`sr_semaphores`
### WHERE
###   @1='chaos'
###   @2=2
###   @3=1
###   @4=0
###   @5=0
###   @6=0
### SET
###   @1='chaos'
###   @2=2
###   @3=1
###   @4=2
###   @5=1
###   @6=3
# Number of rows: 1
#261128 12:09:14 server id 1  end_log_pos 49728 CRC32 0x6e29d31e 	Xid = 216
COMMIT/*!*/;
#261128 12:09:15 server id 1  end_log_pos 50309 CRC32 0x5d43579e 	GTID 0-1-77 trans
START TRANSACTION
#261128 12:09:15 server id 1  end_log_pos 50913 CRC32 0x328d7a92 	Update_rows: table id 31
### UPDATE `chaos`.`sr_data`
### WHERE
###   @1='/chaos-data'
###   @2=''
### SET
###   @1='/chaos-data'
###   @2='{"writer": "it\\x27s", "key": "c215123e946ec011.0", "token": 2, "n": 1}'
#261128 12:09:15 server id 1  end_log_pos 50944 CRC32 0xf4151e85 	Xid = 339
COMMIT/*!*/;
#261128 12:09:15 server id 1  end_log_pos 50986 CRC32 0x5954686f 	GTID 0-1-78 trans
START TRANSACTION
#261128 12:09:15 server id 1  end_log_pos 51407 CRC32 0x78afea28 	Delete_rows: table id 26
### DELETE FROM `chaos`.`sr_entries`
### WHERE
###   @1='chaos'
###   @2='c215123e946ec011.0'
###   @3='c215123e946ec011'
###   @4='o1'
###   @5=2
###   @6=2
###   @7=1
###   @8=1795867754.9730610847
### UPDATE `chaos`.`sr_entries`
### WHERE
###   @1='chaos'
###   @2='4e95466e83867cbf.0'
###   @3='4e95466e83867cbf'
###   @4='o2'
###   @5=1
###   @6=3
###   @7=0
###   @8=1795867754.9772269726
### SET
###   @1='chaos'
###   @2='4e95466e83867cbf.0'
###   @3='4e95466e83867cbf'
###   @4='o2'
###   @5=1
###   @6=3
###   @7=1
###   @8=1795867755.480727911
#261128 12:09:15 server id 1  end_log_pos 52901 CRC32 0x16df6543 	Xid = 400
COMMIT/*!*/;
#261128 12:09:16 server id 1  end_log_pos 53000 CRC32 0x00000000 	GTID 0-1-79 trans
START TRANSACTION
### UPDATE `chaos`.`sr_sessions`
### WHERE
###   @1='4e95466e83867cbf'
###   @2='o2'
###   @3=2000
###   @4=666
###   @5='2026-11-28 12:09:16.769682'
###   @6='2026-11-28 12:09:14.769688'
### SET
###   @1='4e95466e83867cbf'
###   @2='o2'
###   @3=2000
###   @4=666
###   @5='1970-01-02 00:00:00.000000'
###   @6='2026-11-28 12:09:14.769688'
#261128 12:09:16 server id 1  end_log_pos 53100 CRC32 0x00000000 	Xid = 410
COMMIT/*!*/;
#261128 12:09:17 server id 1  end_log_pos 53200 CRC32 0x00000000 	GTID 0-1-80 trans
START TRANSACTION
### DELETE FROM `chaos`.`sr_entries`
### WHERE
###   @1='chaos'
###   @2='4e95466e83867cbf.0'
###   @3='4e95466e83867cbf'
###   @4='o2'
###   @5=1
###   @6=3
###   @7=1
###   @8=1795867755.480727911
### INSERT INTO `chaos`.`sr_data`
### SET
###   @1='/chaos-marker'
###   @2='end'
#261128 12:09:17 server id 1  end_log_pos 53300 CRC32 0x00000000 	Xid = 420
COMMIT/*!*/;
#261128 12:09:18 server id 1  end_log_pos 53400 CRC32 0x00000000 	GTID 0-1-81 trans
START TRANSACTION
### INSERT INTO `chaos`.`sr_data`
### SET
###   @1='/chaos-marker'
###   @2='cut by a crash: never committed'
"""


def test_mariadb_binlog_is_parsed_and_normalized() -> None:
    """mariadb-binlog's text: sessions and the capacity, an entry granted at once and one
    waiting, a fenced write (an escaped quote), a release with the server's grant in the
    same transaction, an operator's expiry, the swept entry of that session, a marker;
    a transaction cut at the end is dropped. Times are the log's second raised to the
    transaction's own microsecond stamps, never going back."""
    from chaos import history_mysql

    layout = history_mysql.MySQLLayout("chaos", "chaos", "/chaos-data", "/chaos-marker")
    changes = history_mysql.parse(MARIADB_BINLOG.splitlines())
    second = datetime.datetime(2026, 11, 28, 12, 9, 14, tzinfo=datetime.timezone.utc)
    t14 = second.timestamp()
    assert [at for _, at in changes][:3] == [t14 + 0.769688] * 3  # the latest renewed_at
    events = history_mysql.normalize(changes, layout)
    o1, o2 = int("c215123e946ec011", 16), int("4e95466e83867cbf", 16)
    granted_at = 1795867755.480727911
    assert events == [
        CapacitySet(2, t14 + 0.769688, 2),
        EntryCreated(3, 1795867754.9772269726, "c215123e946ec011.0", 2, 2, "o1", o1),
        EntryGranted(3, 1795867754.9772269726, "c215123e946ec011.0", 2),
        EntryCreated(4, 1795867754.9772269726, "4e95466e83867cbf.0", 3, 1, "o2", o2),
        FencedWrite(6, t14 + 1, "c215123e946ec011.0", 2, "it's"),
        EntryDeleted(7, granted_at, "c215123e946ec011.0", 2, DeleteCause.DELETE),
        EntryGranted(8, granted_at, "4e95466e83867cbf.0", 3),
        EntryDeleted(10, t14 + 3, "4e95466e83867cbf.0", 3, DeleteCause.SESSION_END),
        Marker(11, t14 + 3, "end"),
    ]
