"""The checker: pure functions from the store's history, the clients' op logs and the
nemesis log to violations by kind. Definitions (docs/reliability.md says why):

* over_capacity: at a fenced write by entry e, the weights of the entries live at that
  point of the history and ordered at or below e exceed every capacity in force from
  e's creation to the write (holders keep what they hold when the capacity shrinks,
  so the largest capacity since e's creation is the bound).
  Where the store records its grants (EntryGranted: PostgreSQL), also at each grant:
  the weights of the live entries the store granted exceed the capacity in force.
* write_after_delete: a fenced write lands while its entry (key + token) is not live.
* overtaking: e writes while a lower entry f is live; f is later deleted by a delete
  (not a session end) without ever being granted, having lived more than ``grace``
  seconds after e's write, with no fault active meanwhile. Under strict FIFO e's
  admission means every lower entry fitted too, so f had to be granted. Where the store
  records its grants: also a grant while a lower entry is live and not granted by the
  store (strict FIFO in the store's own order; no grace, no fault excuses it).
* leak: entries live at the ``quiesced`` marker (every client idle) or at the ``end``
  marker (every client closed, sessions timed out); leases still alive at the end.
* slow_release: entries of a killed client (kill -9) deleted later than session timeout
  + ``release_margin`` after the kill, when no server fault overlaps.
* stall: more than 2 session timeouts without a grant while an acquire waits and no
  fault is active (fault windows extended by ``recovery``).

Server faults are the nemesis's kills and restarts and the elections the runner saw
(``leader_changes``, chaos/leaders.py: an election moves session and lease deadlines
whoever caused it). They excuse liveness and latency (slow_release, stall, overtaking),
never safety (over_capacity, write_after_delete, leak, lost_write).
* lost_write: a fenced write acknowledged to its client is missing from the history.
* unbounded_call: a call that took longer than its bound, or never returned though its
  process was not killed (calls overlapping a SIGSTOP of their process are exempt).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .model import (
    CapacitySet,
    ClientOp,
    DeleteCause,
    EntryCreated,
    EntryDeleted,
    EntryGranted,
    Fault,
    FaultKind,
    FencedWrite,
    HistoryEvent,
    LeaderChange,
    Marker,
    OpKind,
    Outcome,
    Violation,
    ViolationKind,
)

QUIESCED = "quiesced"
END = "end"


@dataclass(frozen=True)
class CheckParams:
    session_timeout: float
    release_margin: float = 1.0
    grace: float | None = None  # overtaking: default one session timeout
    recovery: float | None = None  # after a fault heals: default 2 session timeouts + 2 s

    @property
    def overtake_grace(self) -> float:
        return self.session_timeout if self.grace is None else self.grace

    @property
    def fault_recovery(self) -> float:
        return 2 * self.session_timeout + 2.0 if self.recovery is None else self.recovery


@dataclass
class CheckResult:
    violations: list[Violation] = field(default_factory=list)
    release_latencies: list[float] = field(default_factory=list)
    fenced_writes: int = 0
    grants: int = 0

    def by_kind(self) -> Counter[str]:
        return Counter(v.kind.value for v in self.violations)

    def add(self, kind: ViolationKind, detail: str) -> None:
        self.violations.append(Violation(kind, detail))


@dataclass
class _Live:
    created: EntryCreated
    cap_max: int
    granted: bool = False  # by the clients' op logs, a fenced write or the store
    held: bool = False  # by the store's own grant (EntryGranted)


@dataclass
class _Pending:
    """A lower entry seen live at a write by a higher one (overtaking candidate)."""

    writer: str
    write_time: float | None


def check(
    history: Sequence[HistoryEvent],
    ops: Sequence[ClientOp],
    faults: Sequence[Fault],
    params: CheckParams,
    *,
    live_leases: Iterable[str] = (),
    leader_changes: Iterable[LeaderChange] = (),
) -> CheckResult:
    result = CheckResult()
    faults = [*faults, *(change.as_fault() for change in leader_changes)]
    granted = {
        (op.key, op.token) for op in ops if op.kind is OpKind.ACQUIRE and op.outcome is Outcome.OK
    }
    result.grants = sum(1 for op in ops if op.kind is OpKind.ACQUIRE and op.outcome is Outcome.OK)
    windows = _fault_windows(faults, params.fault_recovery)
    _replay(history, granted, windows, params, result)
    for lease in live_leases:
        result.add(ViolationKind.LEAK, f"lease {lease} still alive at the end")
    _crash_release(history, faults, params, result)
    _stalls(ops, faults, windows, params, result)
    _call_bounds(ops, faults, result)
    _acknowledged_writes(history, ops, result)
    return result


def _acknowledged_writes(
    history: Sequence[HistoryEvent], ops: Sequence[ClientOp], result: CheckResult
) -> None:
    """Every fenced write a client saw succeed is in the store's history (this also
    checks the history reader: a write it missed would show here)."""
    landed = Counter((e.key, e.token) for e in history if isinstance(e, FencedWrite))
    for op in ops:
        if op.kind is OpKind.COMMIT and op.outcome is Outcome.OK:
            ident = (op.key or "", op.token or 0)
            if landed[ident] > 0:
                landed[ident] -= 1
            else:
                result.add(
                    ViolationKind.LOST_WRITE,
                    f"{op.client}/t{op.thread} commit at {op.start:.3f} for {op.key} "
                    f"(token {op.token}) succeeded but is not in the history",
                )


def _fault_windows(faults: Sequence[Fault], recovery: float) -> list[tuple[float, float]]:
    return sorted((f.start, f.end + recovery) for f in faults)


def _overlaps(windows: Sequence[tuple[float, float]], start: float, end: float) -> bool:
    return any(a <= end and start <= b for a, b in windows)


def _replay(
    history: Sequence[HistoryEvent],
    granted: set[tuple[str | None, int | None]],
    windows: Sequence[tuple[float, float]],
    params: CheckParams,
    result: CheckResult,
) -> None:
    live: dict[str, _Live] = {}
    capacity: int | None = None
    pending: dict[tuple[str, int], _Pending] = {}
    for event in history:
        if isinstance(event, CapacitySet):
            capacity = event.capacity
            for entry in live.values():
                entry.cap_max = max(entry.cap_max, capacity)
        elif isinstance(event, EntryCreated):
            if event.key in live:
                result.add(ViolationKind.BAD_HISTORY, f"entry {event.key} created twice")
            if capacity is None:
                result.add(ViolationKind.BAD_HISTORY, f"entry {event.key} before any capacity")
            live[event.key] = _Live(event, capacity or 0, (event.key, event.token) in granted)
        elif isinstance(event, EntryGranted):
            _store_grant(event, live, capacity, result)
        elif isinstance(event, EntryDeleted):
            gone = live.pop(event.key, None)
            if gone is None or gone.created.token != event.token:
                result.add(ViolationKind.BAD_HISTORY, f"delete of unknown entry {event.key}")
                continue
            _settle_pending(
                pending.pop((event.key, event.token), None), gone, event, windows, params, result
            )
        elif isinstance(event, FencedWrite):
            result.fenced_writes += 1
            _fenced_write(event, live, pending, result)
        elif isinstance(event, Marker) and event.name in (QUIESCED, END):
            for key, entry in sorted(live.items()):
                result.add(
                    ViolationKind.LEAK,
                    f"entry {key} (owner {entry.created.owner}, token {entry.created.token}) "
                    f"live at the {event.name!r} marker (pos {event.pos})",
                )


def _store_grant(
    grant: EntryGranted, live: dict[str, _Live], capacity: int | None, result: CheckResult
) -> None:
    """The store's own grant: what it holds then fits the capacity in force, and no
    lower entry waits (its admission takes waiters in token order)."""
    mine = live.get(grant.key)
    if mine is None or mine.created.token != grant.token:
        result.add(ViolationKind.BAD_HISTORY, f"grant of unknown entry {grant.key}")
        return
    if mine.held:
        result.add(ViolationKind.BAD_HISTORY, f"entry {grant.key} granted twice")
    mine.held = mine.granted = True
    holders = sorted((e for e in live.values() if e.held), key=lambda e: e.created.token)
    used = sum(e.created.weight for e in holders)
    if capacity is None or used > capacity:
        names = ", ".join(
            f"{e.created.key}(w{e.created.weight},{e.created.owner})" for e in holders
        )
        result.add(
            ViolationKind.OVER_CAPACITY,
            f"grant of {grant.key} at pos {grant.pos}: the store holds weights {used} > "
            f"capacity {capacity} [{names}]",
        )
    for e in live.values():
        if e.created.token < grant.token and not e.held:
            result.add(
                ViolationKind.OVERTAKING,
                f"grant of {grant.key} (token {grant.token}, owner {mine.created.owner}) at "
                f"pos {grant.pos} while {e.created.key} (token {e.created.token}, owner "
                f"{e.created.owner}) below it waited",
            )


def _fenced_write(
    write: FencedWrite,
    live: dict[str, _Live],
    pending: dict[tuple[str, int], _Pending],
    result: CheckResult,
) -> None:
    mine = live.get(write.key)
    if mine is None or mine.created.token != write.token:
        result.add(
            ViolationKind.WRITE_AFTER_DELETE,
            f"fenced write by {write.writer} at pos {write.pos} for entry {write.key} "
            f"(token {write.token}) which is not live",
        )
        return
    mine.granted = True
    at_or_below = [e for e in live.values() if e.created.token <= write.token]
    used = sum(e.created.weight for e in at_or_below)
    if used > mine.cap_max:
        holders = ", ".join(
            f"{e.created.key}(w{e.created.weight},{e.created.owner})"
            for e in sorted(at_or_below, key=lambda e: e.created.token)
        )
        result.add(
            ViolationKind.OVER_CAPACITY,
            f"fenced write by {write.writer} at pos {write.pos}: weights {used} at or below "
            f"{write.key} > capacity {mine.cap_max} [{holders}]",
        )
    for e in at_or_below:
        if e is not mine and not e.granted:
            pending.setdefault((e.created.key, e.created.token), _Pending(write.writer, write.time))


def _settle_pending(
    candidate: _Pending | None,
    entry: _Live,
    deleted: EntryDeleted,
    windows: Sequence[tuple[float, float]],
    params: CheckParams,
    result: CheckResult,
) -> None:
    if candidate is None or entry.granted or deleted.cause is not DeleteCause.DELETE:
        return
    if candidate.write_time is None or deleted.time is None:
        return  # no clock for this stretch of history: not checkable
    if deleted.time - candidate.write_time <= params.overtake_grace:
        return
    if _overlaps(windows, candidate.write_time, deleted.time):
        return
    result.add(
        ViolationKind.OVERTAKING,
        f"entry {entry.created.key} (owner {entry.created.owner}) was never granted though "
        f"{candidate.writer} above it wrote at {candidate.write_time:.3f}; it was deleted "
        f"{deleted.time - candidate.write_time:.1f} s later",
    )


def _crash_release(
    history: Sequence[HistoryEvent],
    faults: Sequence[Fault],
    params: CheckParams,
    result: CheckResult,
) -> None:
    created: dict[tuple[str, int], EntryCreated] = {}
    deleted: dict[tuple[str, int], EntryDeleted] = {}
    for event in history:
        if isinstance(event, EntryCreated):
            created[(event.key, event.token)] = event
        elif isinstance(event, EntryDeleted):
            deleted[(event.key, event.token)] = event
    server_faults = sorted((f.start, f.end) for f in faults if f.kind.server_side)
    bound = params.session_timeout + params.release_margin
    for kill in faults:
        if kill.kind is not FaultKind.KILL_CLIENT:
            continue
        latest: float | None = None
        unknown = False
        for ident, entry in created.items():
            if entry.owner != kill.target:
                continue
            gone = deleted.get(ident)
            if gone is not None and gone.time is not None and gone.time < kill.start:
                continue
            if gone is None:
                latest = float("inf")  # never released (also a leak)
            elif gone.time is None:
                unknown = True  # no clock for that stretch of history
            else:
                latest = max(latest or 0.0, gone.time - kill.start)
        if latest is None or unknown:
            continue
        if _overlaps(server_faults, kill.start, kill.start + bound):
            continue
        if latest != float("inf"):
            result.release_latencies.append(latest)
        if latest > bound:
            result.add(
                ViolationKind.SLOW_RELEASE,
                f"entries of {kill.target} killed at {kill.start:.3f} released after "
                f"{latest:.2f} s > {bound:.2f} s",
            )


def _stalls(
    ops: Sequence[ClientOp],
    faults: Sequence[Fault],
    windows: Sequence[tuple[float, float]],
    params: CheckParams,
    result: CheckResult,
) -> None:
    acquires = [op for op in ops if op.kind is OpKind.ACQUIRE]
    if not acquires:
        return
    # a call that never returned waited until its process was killed (or to the end)
    horizon = max((op.end or op.start) for op in ops)
    killed = {f.target: f.start for f in faults if f.kind is FaultKind.KILL_CLIENT}
    waiting = _union(
        (op.start, op.end if op.end is not None else killed.get(op.client, horizon))
        for op in acquires
    )
    grants = sorted(op.end for op in acquires if op.outcome is Outcome.OK and op.end is not None)
    limit = 2 * params.session_timeout
    for start, end in _subtract(waiting, _union(windows)):
        cuts = [
            start,
            *grants[bisect.bisect_right(grants, start) : bisect.bisect_left(grants, end)],
            end,
        ]
        for a, b in itertools.pairwise(cuts):
            if b - a > limit:
                result.add(
                    ViolationKind.STALL,
                    f"no grant for {b - a:.1f} s ({a:.3f} .. {b:.3f}) while acquires waited "
                    "and no fault was active",
                )


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _subtract(
    base: list[tuple[float, float]], holes: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in base:
        pieces = [(a, b)]
        for ha, hb in holes:
            pieces = [
                piece
                for pa, pb in pieces
                for piece in ((pa, min(pb, ha)), (max(pa, hb), pb))
                if piece[1] > piece[0]
            ]
        out.extend(pieces)
    return out


def _call_bounds(ops: Sequence[ClientOp], faults: Sequence[Fault], result: CheckResult) -> None:
    killed = {f.target for f in faults if f.kind is FaultKind.KILL_CLIENT}
    pauses = [f for f in faults if f.kind is FaultKind.PAUSE_CLIENT]
    for op in ops:
        if op.outcome is Outcome.ERROR:
            result.add(
                ViolationKind.UNEXPECTED_ERROR,
                f"{op.client}/t{op.thread} {op.kind.value} raised {op.detail}",
            )
        if op.end is None:
            if op.client not in killed:
                result.add(
                    ViolationKind.UNBOUNDED_CALL,
                    f"{op.client}/t{op.thread} {op.kind.value} started at {op.start:.3f} "
                    "never returned",
                )
            continue
        paused = any(
            p.target == op.client and p.start <= op.end and op.start <= p.end for p in pauses
        )
        if not paused and op.end - op.start > op.bound:
            result.add(
                ViolationKind.UNBOUNDED_CALL,
                f"{op.client}/t{op.thread} {op.kind.value} took {op.end - op.start:.1f} s "
                f"> bound {op.bound:.1f} s ({op.outcome.value})",
            )
