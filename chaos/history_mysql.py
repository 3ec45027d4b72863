"""MariaDB's own history: the row changes of the library's tables, from the binary log.

The test server writes a row-based binary log with full row images
(``devtools/mysql_server.py``); once the run is over the runner decodes it with
``mariadb-binlog --base64-output=DECODE-ROWS --verbose --database=<db>`` and this module
reads that text: every committed INSERT, UPDATE and DELETE, in commit order (the binary
log is written in commit order; the library's steps lock the semaphore's row, so for one
semaphore it is the order the server decided in). Columns are printed by position
(``@1=``...); the column order of each table is below. A transaction's rows are kept
when its ``COMMIT/*!*/;`` line comes: a transaction cut by a crash is dropped, as the
server's recovery drops it.

* an INSERT of an entry is its enqueue (token, weight, owner, session);
* an UPDATE to ``held = 1`` is the server's grant (:class:`EntryGranted`);
* a DELETE is its removal: a session end when the entry's session had expired by the
  deleting transaction's commit (before the second after its last event's: the log's
  times are to the second, so this errs towards a session end, by less than a second)
  or its session row is deleted in the same transaction
  (an admission's sweep, ``end_session``, an expiry by the operator), else an explicit
  delete (a release, an abandoned acquire). The server also removes a *held* entry
  whose client's keeper connection is gone (its named lock free) for longer than the
  session's grace, before the session expires: that is invisible in the binary log and
  is read as a DELETE. The checker treats the two causes differently only for entries
  never granted (overtaking), and this sweep only removes granted ones, so DELETE
  flags nothing it should not;
* ``sr_semaphores`` rows set the capacity, ``sr_sessions`` rows their expiry, and
  ``sr_data`` rows are the fenced writes (and the runner's markers, kept there as well).

Times: the log stamps events to the second only (``#YYMMDD HH:MM:SS``, the statement's
start). A transaction's time is that second, raised to the latest microsecond stamp the
transaction itself wrote in the same second (a session's ``renewed_at``, a grant's
``since``), and never below the previous transaction's (commit order): a lower bound of
the commit time, within a second of it. DATETIME values are read as UTC (the runner
starts the server with ``default-time-zone=+00:00``). A position is the change's index.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
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

# the columns of the library's tables, in their order (semaphore_recipes/mysql/schema.py)
COLUMNS = {
    "sr_entries": ("semaphore", "id", "session", "owner", "weight", "token", "held", "since"),
    "sr_sessions": ("id", "owner", "timeout_ms", "grace_ms", "expires_at", "renewed_at"),
    "sr_semaphores": ("name", "capacity", "version", "used", "waiting", "head"),
    "sr_data": ("k", "value"),
}

_HEADER = re.compile(r"^#(\d{6} +\d{1,2}:\d\d:\d\d) server id ")
_ROW = re.compile(
    r"^### (?P<op>INSERT INTO|UPDATE|DELETE FROM) `(?P<db>[^`]+)`\.`(?P<table>[^`]+)`"
)
_VALUE = re.compile(r"^###   @(?P<n>\d+)=(?P<value>.*)$")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")
_OPS = {"INSERT INTO": "INSERT", "UPDATE": "UPDATE", "DELETE FROM": "DELETE"}


@dataclass(frozen=True)
class MySQLLayout:
    database: str
    semaphore: str
    data_key: str  # every fenced write sets it
    marker_key: str  # the runner's markers, rows of the same ``sr_data`` table


@dataclass(frozen=True)
class Change:
    table: str  # database.table
    op: str  # INSERT / UPDATE / DELETE
    row: dict[str, Any]  # the new row (the old one for a DELETE), by column name
    txn: int = 0  # the transaction's index in the log
    by: float = math.inf  # the transaction committed before this (its last second + 1)


def parse_value(text: str) -> Any:
    """One ``@n=`` value as ``mariadb-binlog -v`` prints it: a quoted string (quote,
    backslash and control bytes as ``\\xNN``), ``NULL``, an integer or a decimal."""
    if text.startswith("'") and text.endswith("'") and len(text) >= 2:
        return _ESCAPE.sub(lambda m: chr(int(m[1], 16)), text[1:-1])
    if text == "NULL":
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


def _named(table: str, values: dict[int, Any]) -> dict[str, Any]:
    names = COLUMNS.get(table.split(".", 1)[1], ())
    return {names[n - 1] if n <= len(names) else f"@{n}": v for n, v in values.items()}


def _stamps(change: Change) -> list[float]:
    """The microsecond times a change wrote itself (SYSDATE(6) of its statement)."""
    name = change.table.split(".", 1)[1]
    if change.op == "DELETE":
        return []
    if name == "sr_sessions" and isinstance(change.row.get("renewed_at"), str):
        return [timestamp(change.row["renewed_at"])]
    if name == "sr_entries" and isinstance(change.row.get("since"), int | float):
        return [float(change.row["since"])]
    return []


def parse(lines: Iterable[str]) -> list[tuple[Change, float]]:
    """Every committed row change of the decoded binary log, with its transaction's time."""
    out: list[tuple[Change, float]] = []
    pending: list[Change] = []
    header = -math.inf  # the second of the last event header
    second = -math.inf  # the first event header of the open transaction
    last = -math.inf  # the previous transaction's time
    txn = 0
    current: tuple[str, str] | None = None  # (table, op) of the row being read
    image: dict[int, Any] = {}

    def flush_row() -> None:
        nonlocal image
        if current is not None and image:
            pending.append(Change(current[0], current[1], _named(current[0], image)))
        image = {}

    for raw in lines:
        line = raw.rstrip("\n")
        if (head := _HEADER.match(line)) is not None:
            header = (
                datetime.strptime(head[1].replace("  ", " "), "%y%m%d %H:%M:%S")
                .replace(tzinfo=timezone.utc)
                .timestamp()
            )
            if not pending and current is None:
                second = header
        elif line in ("START TRANSACTION", "BEGIN/*!*/;"):
            pending, current, image, second = [], None, {}, header
        elif (row := _ROW.match(line)) is not None:
            flush_row()
            current = (f"{row['db']}.{row['table']}", _OPS[row["op"]])
        elif line == "### WHERE":
            image = {}
        elif line == "### SET":
            if current is not None and current[1] == "UPDATE":
                image = {}  # the new image replaces the old one
        elif (value := _VALUE.match(line)) is not None:
            image[int(value["n"])] = parse_value(value["value"])
        elif line.startswith("COMMIT/*!*/;"):
            flush_row()
            if pending:
                stamps = [s for c in pending for s in _stamps(c) if second <= s < second + 1]
                at = max([second, last, *stamps])
                by = max(header + 1, at)
                txn += 1
                out += [(replace(change, txn=txn, by=by), at) for change in pending]
                last = at
            pending, current, image = [], None, {}
        elif line.startswith("ROLLBACK"):
            pending, current, image = [], None, {}
        elif not line.startswith("###"):
            flush_row()
            current = None
    return out


def timestamp(text: str) -> float:
    """A DATETIME(6) as printed (``YYYY-MM-DD HH:MM:SS[.ffffff]``), read as UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def normalize(changes: Iterable[tuple[Change, float]], layout: MySQLLayout) -> list[HistoryEvent]:
    """The checker's events from the changes of the library's tables."""
    changes = list(changes)
    entries_table = f"{layout.database}.sr_entries"
    sessions_table = f"{layout.database}.sr_sessions"
    # sessions whose row a transaction deletes (its entries end with it), by transaction
    ended_in: dict[int, set[str]] = {}
    for change, _ in changes:
        if change.table == sessions_table and change.op == "DELETE":
            ended_in.setdefault(change.txn, set()).add(change.row["id"])
    expiry: dict[str, float] = {}  # session id -> expires_at (absent: no such session)
    held: set[str] = set()
    capacity: int | None = None
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
                session = row["session"]
                ended = expiry.get(session, -math.inf) < change.by or session in ended_in.get(
                    change.txn, set()
                )
                cause = DeleteCause.SESSION_END if ended else DeleteCause.DELETE
                events.append(EntryDeleted(pos, at, key, row["token"], cause))
        elif change.table == f"{layout.database}.sr_semaphores" and op != "DELETE":
            if row.get("name") == layout.semaphore and row["capacity"] != capacity:
                capacity = row["capacity"]
                events.append(CapacitySet(pos, at, row["capacity"]))
        elif change.table == f"{layout.database}.sr_data" and op != "DELETE":
            value = str(row["value"])
            if row["k"] == layout.marker_key:
                events.append(Marker(pos, at, value))
            elif row["k"] == layout.data_key and value:  # (not the empty row made first)
                doc = json.loads(value)
                events.append(FencedWrite(pos, at, doc["key"], int(doc["token"]), doc["writer"]))
    return events
