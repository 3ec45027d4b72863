"""PostgreSQL's own history: the changes of the library's tables, by logical decoding.

The runner makes a logical replication slot with the built-in ``test_decoding`` plugin
before any client starts, and reads it (``pg_logical_slot_get_changes``) once the run
is over: every committed INSERT, UPDATE and DELETE, in commit order, each transaction
with its commit time. The library's steps lock the semaphore's row, so for one
semaphore commit order is the order the server decided in. The ``entries`` table has
``REPLICA IDENTITY FULL`` (the runner sets it), so a DELETE shows the whole row:

* an INSERT of an entry is its enqueue (token, weight, owner, session);
* an UPDATE to ``held = true`` is the server's grant (:class:`EntryGranted`);
* a DELETE is its removal: a session end when the entry's session had expired by the
  deleting transaction's commit time (an admission's sweep, ``end_session``, an expiry
  by the admin), else an explicit delete (a release, an abandoned acquire);
* ``semaphores`` rows set the capacity, ``sessions`` rows their expiry, and ``data``
  rows are the fenced writes (and the runner's markers, kept there as well).

A position is the change's index in the slot's output; a time is its commit time.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .model import (
    CapacitySet,
    DeleteCause,
    EntryCreated,
    EntryDeleted,
    EntryGranted,
    FencedWrite,
    HistoryEvent,
    Marker,
)

SLOT = "chaos"
# the options of test_decoding the reader expects (commit times on COMMIT lines)
CHANGES_SQL = (
    f"SELECT data FROM pg_logical_slot_get_changes('{SLOT}', NULL, NULL, "
    "'include-timestamp', 'on', 'include-xids', 'off')"
)
# (times print in the reading session's zone and style: UTC, ISO)
READER_SETTINGS = ("SET TimeZone = 'UTC'", "SET DateStyle = 'ISO'")

_CHANGE = re.compile(r"^table (?P<schema>[^.]+)\.(?P<table>[^:]+): (?P<op>INSERT|UPDATE|DELETE):")
_COLUMN = re.compile(r"(?P<name>\w+)\[(?P<type>[^\]]+)\]:(?P<value>'(?:[^']|'')*'|\S+)")
_COMMIT = re.compile(r"^COMMIT(?: \d+)? \(at (?P<at>[^)]+)\)$")


@dataclass(frozen=True)
class PostgreSQLLayout:
    schema: str
    semaphore: str
    data_key: str  # every fenced write sets it
    marker_key: str  # the runner's markers, rows of the same ``data`` table


@dataclass(frozen=True)
class Change:
    table: str  # schema.table
    op: str  # INSERT / UPDATE / DELETE
    row: dict[str, Any]  # the new row (the old one for a DELETE)


def parse_row(text: str) -> dict[str, Any]:
    """``name[type]:value ...`` as test_decoding prints a tuple: quoted text unquoted,
    integers and booleans converted, ``null`` as None."""
    row: dict[str, Any] = {}
    for match in _COLUMN.finditer(text):
        value, kind = match["value"], match["type"]
        if value == "null":
            row[match["name"]] = None
        elif value.startswith("'"):
            row[match["name"]] = value[1:-1].replace("''", "'")
        elif kind in ("integer", "bigint", "smallint"):
            row[match["name"]] = int(value)
        elif kind == "boolean":
            row[match["name"]] = value == "true"
        elif kind == "double precision":
            row[match["name"]] = float(value)
        else:
            row[match["name"]] = value
    return row


def parse(lines: Iterable[str]) -> list[tuple[Change, float]]:
    """Every row change of the slot's output, with its transaction's commit time."""
    out: list[tuple[Change, float]] = []
    pending: list[Change] = []
    for line in lines:
        if line.startswith("BEGIN"):
            pending = []
        elif (commit := _COMMIT.match(line)) is not None:
            at = timestamp(commit["at"])
            out += [(change, at) for change in pending]
            pending = []
        elif (change := _CHANGE.match(line)) is not None:
            body = line[change.end() :]
            if "new-tuple:" in body:  # an UPDATE with the old row first
                body = body.split("new-tuple:", 1)[1]
            pending.append(
                Change(f"{change['schema']}.{change['table']}", change["op"], parse_row(body))
            )
        elif line.startswith("COMMIT"):
            raise ValueError(f"a COMMIT without its time (include-timestamp off?): {line!r}")
    return out


def timestamp(text: str) -> float:
    """A ``timestamptz`` as printed in UTC and ISO style (or ``±infinity``)."""
    if text in ("infinity", "-infinity"):
        return math.inf if text == "infinity" else -math.inf
    return datetime.fromisoformat(text).timestamp()


def normalize(
    changes: Iterable[tuple[Change, float]], layout: PostgreSQLLayout
) -> list[HistoryEvent]:
    """The checker's events from the changes of the library's tables."""
    entries_table = f"{layout.schema}.entries"
    sessions_table = f"{layout.schema}.sessions"
    expiry: dict[str, float] = {}  # session id -> expires_at (absent: no such session)
    held: set[str] = set()
    events: list[HistoryEvent] = []
    for pos, (change, at) in enumerate(changes):
        row, op = change.row, change.op
        if change.table == sessions_table:
            if op == "DELETE":
                expiry.pop(row["id"], None)
            else:
                expiry[row["id"]] = timestamp(row["expires_at"])
        elif change.table == entries_table and row.get("semaphore") == layout.semaphore:
            key = row["id"]
            if op == "INSERT":
                events.append(
                    EntryCreated(
                        pos, at, key, row["token"], row["weight"], row["owner"],
                        int(row["session"], 16),
                    )
                )  # fmt: skip
                if row["held"]:
                    held.add(key)
                    events.append(EntryGranted(pos, at, key, row["token"]))
            elif op == "UPDATE" and row["held"] and key not in held:
                held.add(key)
                events.append(EntryGranted(pos, at, key, row["token"]))
            elif op == "DELETE":
                held.discard(key)
                ended = expiry.get(row["session"], -math.inf) <= at
                cause = DeleteCause.SESSION_END if ended else DeleteCause.DELETE
                events.append(EntryDeleted(pos, at, key, row["token"], cause))
        elif change.table == f"{layout.schema}.semaphores" and op != "DELETE":
            if row.get("name") == layout.semaphore:
                events.append(CapacitySet(pos, at, row["capacity"]))
        elif change.table == f"{layout.schema}.data" and op != "DELETE":
            value = bytes.fromhex(str(row["value"]).removeprefix("\\x"))
            if row["key"] == layout.marker_key:
                events.append(Marker(pos, at, value.decode()))
            elif row["key"] == layout.data_key and value:  # (not the empty row made first)
                doc = json.loads(value)
                events.append(FencedWrite(pos, at, doc["key"], int(doc["token"]), doc["writer"]))
    return events
