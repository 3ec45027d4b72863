"""ZooKeeper's own history: the members' binary transaction logs, parsed here.

A log file is ``ZKLG`` + version + dbid, then records: crc (long), length (int), the
txn bytes (jute TxnHeader {clientId long, cxid int, zxid long, time long, type int}
then the body, then an optional digest), and a trailing ``B``. Files are preallocated
with zeros: a zero length ends the read. Every member's logs are merged by zxid (a
member that caught up from a snapshot lacks some txns). A closeSession (close or
expiry) removes that session's ephemerals without a delete txn: the reader tracks each
ephemeral's owner from its create.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from semaphore_recipes._core.names import parse_zk_entry

from .model import (
    CapacitySet,
    DeleteCause,
    EntryCreated,
    EntryDeleted,
    FencedWrite,
    HistoryEvent,
    Marker,
)

MAGIC = b"ZKLG"
CREATE, DELETE, SET_DATA, CHECK, MULTI, CREATE2 = 1, 2, 5, 13, 14, 15
CREATE_CONTAINER, CREATE_TTL = 19, 21
CREATE_SESSION, CLOSE_SESSION, ERROR = -10, -11, -1
_HEADER = struct.Struct(">qiqqi")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def buffer(self) -> bytes | None:
        length = self.take(">i")
        if length < 0:
            return None
        value = self.data[self.at : self.at + length]
        self.at += length
        return value

    def string(self) -> str:
        raw = self.buffer()
        return "" if raw is None else raw.decode()


@dataclass(frozen=True)
class Op:
    """One create/delete/setData/check (a txn or a part of a multi)."""

    type: int
    path: str = ""
    data: bytes = b""
    ephemeral: bool = False


@dataclass(frozen=True)
class Txn:
    zxid: int
    time_ms: int
    session: int
    type: int
    ops: tuple[Op, ...]  # empty for session txns; a failed multi has an ERROR op


def _op(type_: int, body: bytes) -> Op:
    r = _Reader(body)
    if type_ in (CREATE, CREATE2, CREATE_CONTAINER, CREATE_TTL):
        path = r.string()
        data = r.buffer() or b""
        for _ in range(max(0, r.take(">i"))):  # ACLs: perms, scheme, id
            r.take(">i")
            r.string()
            r.string()
        ephemeral = r.take(">b") != 0 if type_ != CREATE_TTL else False
        return Op(type_, path, data, ephemeral)
    if type_ == DELETE:
        return Op(type_, r.string())
    if type_ == SET_DATA:
        path = r.string()
        return Op(type_, path, r.buffer() or b"")
    if type_ == CHECK:
        return Op(type_, r.string())
    return Op(type_)


def _txn(raw: bytes) -> Txn:
    session, _cxid, zxid, time_ms, type_ = _HEADER.unpack_from(raw, 0)
    body = raw[_HEADER.size :]
    if type_ == MULTI:
        r = _Reader(body)
        ops = []
        for _ in range(max(0, r.take(">i"))):
            sub_type = r.take(">i")
            ops.append(_op(sub_type, r.buffer() or b""))
        return Txn(zxid, time_ms, session, type_, tuple(ops))
    if type_ in (CREATE_SESSION, CLOSE_SESSION):
        return Txn(zxid, time_ms, session, type_, ())
    return Txn(zxid, time_ms, session, type_, (_op(type_, body),))


def read_log_file(path: Path) -> Iterator[Txn]:
    data = path.read_bytes()
    if data[:4] != MAGIC:
        raise ValueError(f"{path}: not a ZooKeeper transaction log")
    at = 16  # magic, version, dbid
    while at + 12 <= len(data):
        _crc, length = struct.unpack_from(">qi", data, at)
        if length <= 0 or at + 12 + length + 1 > len(data):
            return  # preallocated zeros (or a record cut short by a kill)
        raw = data[at + 12 : at + 12 + length]
        if data[at + 12 + length : at + 13 + length] != b"B":
            return
        yield _txn(raw)
        at += 13 + length


def read_logs(data_dirs: Iterable[Path]) -> tuple[list[Txn], list[str]]:
    """Every txn of every member's logs, merged by zxid; plus conflicts found."""
    by_zxid: dict[int, Txn] = {}
    conflicts: list[str] = []
    for data_dir in data_dirs:
        for path in sorted((data_dir / "version-2").glob("log.*")):
            for txn in read_log_file(path):
                seen = by_zxid.setdefault(txn.zxid, txn)
                if seen != txn:
                    conflicts.append(f"zxid 0x{txn.zxid:x} differs between members ({path})")
    return [by_zxid[z] for z in sorted(by_zxid)], conflicts


@dataclass(frozen=True)
class ZkLayout:
    semaphore_path: str  # its data is the capacity, its children the entries
    data_path: str  # the node every fenced write sets
    marker_path: str  # the node the runner sets to mark phases


def normalize(txns: Iterable[Txn], layout: ZkLayout) -> list[HistoryEvent]:
    events: list[HistoryEvent] = []
    live: dict[str, tuple[int, int]] = {}  # entry node -> (czxid, session)
    prefix = layout.semaphore_path + "/"
    for txn in txns:
        when = txn.time_ms / 1000.0
        if txn.type == CLOSE_SESSION:
            gone = sorted((t, k) for k, (t, s) in live.items() if s == txn.session)
            for token, key in gone:
                del live[key]
                events.append(EntryDeleted(txn.zxid, when, key, token, DeleteCause.SESSION_END))
            continue
        if any(op.type == ERROR for op in txn.ops):
            continue  # a failed txn (a multi whose fence or other op failed)
        checked = [op.path for op in txn.ops if op.type == CHECK]
        for op in txn.ops:
            if op.type in (CREATE, CREATE2) and op.path.startswith(prefix):
                key = op.path[len(prefix) :]
                parsed = parse_zk_entry(key)
                if parsed is None:
                    continue
                owner = json.loads(op.data).get("owner", "")
                session = txn.session if op.ephemeral else 0
                live[key] = (txn.zxid, session)
                events.append(
                    EntryCreated(txn.zxid, when, key, txn.zxid, parsed[1], owner, session)
                )
            elif op.type in (CREATE, CREATE2, SET_DATA) and op.path == layout.semaphore_path:
                events.append(CapacitySet(txn.zxid, when, int(json.loads(op.data)["capacity"])))
            elif op.type == DELETE and op.path.startswith(prefix):
                key = op.path[len(prefix) :]
                if key in live:
                    token, _ = live.pop(key)
                    events.append(EntryDeleted(txn.zxid, when, key, token, DeleteCause.DELETE))
            elif op.type == SET_DATA and op.path == layout.data_path and checked:
                value = json.loads(op.data)
                key = checked[0][len(prefix) :]
                events.append(
                    FencedWrite(txn.zxid, when, key, int(value["token"]), value["writer"])
                )
            elif op.type == SET_DATA and op.path == layout.marker_path:
                events.append(Marker(txn.zxid, when, op.data.decode()))
    return events
