"""Redis's own history: the append-only file of the server under test.

The server runs with ``appendonly yes``, ``appendfsync always`` and no AOF rewrite, so
its AOF holds every write it made, in the order it made them, durable across restarts
(a restarted server appends to the same file). Scripts are written there as their
effects (``MULTI``, the writes, ``EXEC``), so the production scripts need no test mode:
an entry's creation is the ``HSET`` of its hash field (its JSON names its order, weight,
owner and lease), its removal the ``HDEL``, and a lease's expiry the ``DEL`` the server
writes when it expires the lease key (a script that meets an expired lease expires it
first, so that ``DEL`` comes before any script's effect that counts the entry dead):
the end of the session of every entry of that lease. A position is the command's index
in the file. Redis keeps no time there: the runner sets a clock key a few times a
second, and each event gets the time of the last tick at or before it (as for etcd).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .history_etcd import RawEvent, clock
from .model import (
    CapacitySet,
    DeleteCause,
    EntryCreated,
    EntryDeleted,
    FencedWrite,
    HistoryEvent,
    Marker,
)


@dataclass(frozen=True)
class RedisLayout:
    prefix: str  # the URL's prefix (P)
    semaphore: str  # S
    data_key: str  # every fenced write sets it
    marker_key: str
    clock_key: str

    @property
    def entries_key(self) -> bytes:
        return f"{self.prefix}:s:{self.semaphore}:e".encode()

    @property
    def config_key(self) -> bytes:
        return f"{self.prefix}:s:{self.semaphore}:cfg".encode()

    @property
    def lease_prefix(self) -> bytes:
        return f"{self.prefix}:lease:".encode()


def aof_files(directory: Path) -> tuple[list[Path], list[str]]:
    """The incremental AOF files of ``directory`` (Redis 7's ``appendonlydir``), in the
    manifest's order, and the problems found (a rewrite folds history into a base file
    that this reader cannot replay: the runner turns rewrites off)."""
    manifest = next(directory.glob("*.manifest"), None)
    if manifest is None:
        return [], [f"no AOF manifest in {directory}"]
    files: list[Path] = []
    problems: list[str] = []
    for line in manifest.read_text().splitlines():
        fields = line.split()
        name, kind = fields[fields.index("file") + 1], fields[fields.index("type") + 1]
        if kind == "i":
            files.append(directory / name)
        elif kind == "b" and (directory / name).stat().st_size > 200:
            problems.append(f"AOF base file {name} holds data (a rewrite?): not replayed")
    return files, problems


def read_commands(paths: Iterable[Path]) -> Iterator[list[bytes]]:
    """Every command of the AOF files, in order (RESP arrays of bulk strings)."""
    for path in paths:
        data = path.read_bytes()
        i = 0
        while i < len(data):
            if data[i : i + 1] != b"*":
                raise ValueError(f"{path}: not a RESP array at byte {i}")
            end = data.index(b"\r\n", i)
            count = int(data[i + 1 : end])
            i = end + 2
            command = []
            for _ in range(count):
                end = data.index(b"\r\n", i)
                size = int(data[i + 1 : end])
                command.append(data[end + 2 : end + 2 + size])
                i = end + 2 + size + 2
            yield command


def normalize(commands: Iterable[list[bytes]], layout: RedisLayout) -> list[HistoryEvent]:
    """The checker's events from the AOF's commands."""
    raw: list[tuple[int, list[bytes]]] = []
    ticks: list[RawEvent] = []
    clock_key = layout.clock_key.encode()
    for pos, command in enumerate(commands):
        name = command[0].lower()
        if name == b"set" and command[1] == clock_key:
            ticks.append(RawEvent(False, clock_key, command[2], pos, pos, 0))
        elif name not in (b"multi", b"exec", b"select"):
            raw.append((pos, command))
    at = clock(ticks, clock_key)
    entries: dict[str, tuple[int, str]] = {}  # live entry id -> (token, lease)
    events: list[HistoryEvent] = []
    for pos, command in raw:
        name, args = command[0].lower(), command[1:]
        now = at(pos)
        if name == b"hset" and args[0] == layout.entries_key:
            for i in range(1, len(args), 2):
                key = args[i].decode()
                if key not in entries:  # (a later HSET of it is its held mark)
                    doc = json.loads(args[i + 1])
                    entries[key] = (int(doc["t"]), str(doc["l"]))
                    events.append(
                        EntryCreated(
                            pos, now, key, int(doc["t"]), int(doc["w"]), str(doc["o"]),
                            int(str(doc["l"]), 16),
                        )
                    )  # fmt: skip
        elif name == b"hdel" and args[0] == layout.entries_key:
            for field in args[1:]:
                found = entries.pop(field.decode(), None)
                if found is not None:
                    events.append(
                        EntryDeleted(pos, now, field.decode(), found[0], DeleteCause.DELETE)
                    )
        elif name in (b"del", b"unlink"):
            for gone in args:
                if gone.startswith(layout.lease_prefix):
                    lease = gone[len(layout.lease_prefix) :].decode()
                    for entry_id, (token, owner_lease) in list(entries.items()):
                        if owner_lease == lease:
                            del entries[entry_id]
                            events.append(
                                EntryDeleted(pos, now, entry_id, token, DeleteCause.SESSION_END)
                            )
                elif gone == layout.entries_key:  # the semaphore deleted
                    for entry_id, (token, _) in entries.items():
                        events.append(EntryDeleted(pos, now, entry_id, token, DeleteCause.DELETE))
                    entries.clear()
        elif name == b"hset" and args[0] == layout.config_key:
            fields = dict(zip(args[1::2], args[2::2], strict=True))
            if b"capacity" in fields:
                events.append(CapacitySet(pos, now, int(fields[b"capacity"])))
        elif name == b"set" and args[0] == layout.data_key.encode():
            if args[1]:  # (not the empty key made at the start, for fenced sets to replace)
                doc = json.loads(args[1])
                events.append(FencedWrite(pos, now, doc["key"], int(doc["token"]), doc["writer"]))
        elif name == b"set" and args[0] == layout.marker_key.encode():
            events.append(Marker(pos, now, args[1].decode()))
    return events
