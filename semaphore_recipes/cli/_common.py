"""What every subcommand shares: exit codes, the URL, connecting, errors, output.

Expected failures become a :class:`CliError` (or one of the library's errors) and are
printed as one line on stderr by :func:`semaphore_recipes.cli.main`; only a bug in this
program prints a traceback (exit status 70).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import sys
import time
from typing import Any, TextIO

from .. import registry
from .._core.names import validate_name
from .._core.ramp import RampPlan
from .._core.shown import redact_url
from .._core.status import EntryStatus, Status
from .._url import ServiceURL
from ..client import Client
from ..errors import (
    AcquireTimeout,
    BackendNotInstalled,
    BackendUnavailable,
    CapacityMismatch,
    CorruptState,
    Draining,
    DrainTimeout,
    InvalidName,
    NotSupported,
    PermissionDenied,
    PermitLost,
    SemaphoreNotFound,
    WouldBlock,
)

ENV_URL = "SEMAPHORE_RECIPES_URL"
PROG = "semaphore-recipes"


class ExitCode(enum.IntEnum):
    """Exit statuses of ``semaphore-recipes`` (sysexits.h values where one fits).

    ``run`` otherwise exits with its command's own status, or 128+N when the command
    died of signal N (or when ``run`` itself was stopped by signal N while waiting).
    """

    OK = 0
    DEMO_FAILED = 1  #: demo: one of its checks did not hold
    USAGE = 64  #: EX_USAGE: bad arguments, semaphore name or URL; no URL at all
    CONFLICT = 65  #: EX_DATAERR: stored with another capacity, or unreadable stored data
    NO_SUCH_SEMAPHORE = 66  #: EX_NOINPUT: status/set-capacity of a semaphore that does not exist
    NO_SUCH_HOLDER = 67  #: EX_NOUSER: revoke: no holder matched --token/--owner/--all
    UNAVAILABLE = 69  #: EX_UNAVAILABLE: server unreachable, or no server software / extra
    INTERNAL = 70  #: EX_SOFTWARE: a bug in semaphore-recipes (a traceback is printed)
    #: EX_TEMPFAIL: run --timeout passed before the permit was granted; drain --wait
    #: --timeout passed with holders left
    TIMEOUT = 75
    PERMIT_LOST = 76  #: the permit was lost (run: while the command ran; it was stopped)
    NO_PERMISSION = 77  #: EX_NOPERM: the server refused the credentials or the access (ACL, role)
    IN_USE = 73  #: delete: the semaphore has holders or waiters (--force deletes it anyway)
    DRAINING = 79  #: the semaphore drains: run/hold refused (semaphore-recipes drain)
    #: set-capacity --ramp/--resume: another client dropped or replaced the ramp's plan
    RAMP_CANCELLED = 80
    CANNOT_EXECUTE = 126  #: the command exists but could not be executed
    COMMAND_NOT_FOUND = 127  #: the command was not found


class CliError(Exception):
    """An expected failure: ``message`` goes to stderr as one line, ``code`` is the exit."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def error_for(exc: BaseException) -> CliError | None:
    """The one-line message and exit code of an expected failure, else None (a bug)."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, CapacityMismatch):
        return CliError(
            ExitCode.CONFLICT,
            f"semaphore {exc.name!r} is stored with capacity {exc.stored}, not {exc.requested}: "
            f"pass --capacity {exc.stored} or --adopt-capacity, or change it with "
            f"`{PROG} set-capacity {exc.name} {exc.requested}`",
        )
    if isinstance(exc, CorruptState):
        return CliError(ExitCode.CONFLICT, str(exc))
    if isinstance(exc, SemaphoreNotFound):
        return CliError(
            ExitCode.NO_SUCH_SEMAPHORE,
            f"no such semaphore {exc.name!r} ({exc.where}; "
            f"`{PROG} run {exc.name} --capacity N -- CMD` creates it)",
        )
    if isinstance(exc, PermissionDenied):
        return CliError(ExitCode.NO_PERMISSION, str(exc))
    if isinstance(exc, Draining):
        return CliError(ExitCode.DRAINING, f"{exc} (`{PROG} resume {exc.name}` ends the draining)")
    if isinstance(exc, DrainTimeout):
        return CliError(ExitCode.TIMEOUT, f"{exc} (it stays draining)")
    if isinstance(exc, (AcquireTimeout, WouldBlock)):
        return CliError(ExitCode.TIMEOUT, str(exc) or "timed out waiting for the permit")
    if isinstance(exc, PermitLost):
        return CliError(ExitCode.PERMIT_LOST, str(exc))
    if isinstance(exc, BackendUnavailable):
        detail = str(exc)
        cause = exc.__cause__
        if cause is not None and str(cause) and str(cause) not in detail:
            detail += f" ({cause})"
        return CliError(ExitCode.UNAVAILABLE, detail)
    if isinstance(exc, BackendNotInstalled):
        return CliError(ExitCode.UNAVAILABLE, str(exc))
    if isinstance(exc, (InvalidName, ValueError, NotSupported)):
        return CliError(ExitCode.USAGE, str(exc))
    if isinstance(exc, ConnectionError):
        return CliError(ExitCode.UNAVAILABLE, str(exc) or type(exc).__name__)
    return None


# ---- URL, name and connection ------------------------------------------------------


def resolve_url(given: str | None) -> tuple[str, ServiceURL]:
    """``--url`` or ``$SEMAPHORE_RECIPES_URL``, parsed (no I/O); CliError(USAGE) if bad."""
    url = given if given is not None else os.environ.get(ENV_URL)
    if not url:
        raise CliError(
            ExitCode.USAGE,
            f"no server URL: pass --url or set {ENV_URL} "
            f"(e.g. etcd://127.0.0.1:2379; `{PROG} dev-server` starts a local one)",
        )
    try:
        return url, registry.parse_url(url)
    except (ValueError, TypeError) as exc:
        raise CliError(ExitCode.USAGE, f"bad URL: {exc}") from None


def check_name(name: str) -> str:
    try:
        return validate_name(name)
    except InvalidName as exc:
        raise CliError(ExitCode.USAGE, str(exc)) from None


def connect(url: str, *, owner: str | None = None) -> Client:
    """``semaphore_recipes.connect``: the backend is found by the URL's scheme."""
    from .. import connect as sr_connect

    return sr_connect(url, owner=owner)


def describe_url(parsed: ServiceURL) -> str:
    """The URL without its parameters, its password masked (``redis://user:***@host``)."""
    where = parsed.hosts_string if parsed.hosts else redact_url(parsed.netloc)
    return f"{parsed.scheme}://{where}{parsed.path}"


# ---- logging and output --------------------------------------------------------------


def setup_logging(verbose: int) -> None:
    """Library warnings (connection lost, session expired, ...) go to stderr.

    ``-v`` adds the library's info messages, ``-vv`` debug messages and the client
    libraries' own (kazoo) warnings, which otherwise repeat on every reconnect attempt.
    """
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if verbose < 2 else logging.DEBUG)
    logging.getLogger("semaphore_recipes").setLevel(level)
    if verbose < 2:
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)


def say(message: str, stream: TextIO | None = None) -> None:
    """One line to stderr (or ``stream``), prefixed with the program name."""
    print(f"{PROG}: {message}", file=stream or sys.stderr, flush=True)


def format_age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def status_rows(st: Status) -> list[tuple[int, str, EntryStatus]]:
    """(queue position, "holding"/"revoked"/"waiting", entry) in queue order
    ("revoked": a holder asked to give its permits back)."""
    rows = [
        (i + 1, "revoked" if e.revoke_requested else "holding", e) for i, e in enumerate(st.holders)
    ]
    rows += [(len(rows) + i + 1, "waiting", e) for i, e in enumerate(st.waiters)]
    return rows


def status_json(st: Status, now: float | None = None) -> dict[str, Any]:
    """The ``status --json`` document (see docs/cli.md)."""
    now = time.time() if now is None else now

    def entry(pos: int, e: EntryStatus) -> dict[str, Any]:
        return {
            "position": pos,
            "owner": e.owner,
            "permits": e.permits,
            "token": e.token,
            "key": e.key,
            "slots": list(e.slots),
            "revoke_requested": e.revoke_requested,
            "since": e.since,
            "age": round(max(0.0, now - e.since), 3),
        }

    rows = status_rows(st)
    return {
        "name": st.name,
        "capacity": st.capacity,
        "used": st.used,
        "free": max(0, st.capacity - st.used),
        "holders": [entry(pos, e) for pos, state, e in rows if state != "waiting"],
        "waiters": [entry(pos, e) for pos, state, e in rows if state == "waiting"],
        "draining": st.draining,
        "ramp": ramp_json(st.ramp, now),
        "time": now,
    }


def ramp_json(plan: RampPlan | None, now: float) -> dict[str, Any] | None:
    """A capacity ramp's plan in ``status --json`` (None: no ramp under way)."""
    if plan is None:
        return None
    return {
        "target": plan.target,
        "step": plan.step,
        "interval": plan.interval,
        "next_step_at": plan.next_at,
        "next_step_in": round(plan.next_at - now, 3),
        "stalled": plan.stalled(now),
        "by": plan.by,
        "since": plan.since,
    }


def ramp_line(name: str, plan: RampPlan, now: float) -> str:
    """The ``status`` table's line about a capacity ramp under way."""
    line = (
        f"ramp: to {plan.target} by {plan.step} every {plan.interval:g}s "
        f"(started by {plan.by}, {format_age(now - plan.since)} ago); "
    )
    due = plan.next_at - now
    if plan.stalled(now):
        return line + (
            f"STALLED: next step overdue by {format_age(-due)} "
            f"(`{PROG} set-capacity {name} --resume` continues it)"
        )
    if due <= 0:
        return line + "next step due now"
    return line + f"next step in {format_age(due)}"


def status_table(st: Status, now: float | None = None) -> list[str]:
    """The ``status`` table: a summary line, then one line per entry in queue order."""
    now = time.time() if now is None else now
    free = max(0, st.capacity - st.used)
    holders = f"{len(st.holders)} holder" + ("" if len(st.holders) == 1 else "s")
    waiters = f"{len(st.waiters)} waiter" + ("" if len(st.waiters) == 1 else "s")
    drains = "; DRAINING (new acquires refused)" if st.draining else ""
    lines = [
        f"{st.name}: capacity {st.capacity}, {st.used} in use, {free} free; {holders}, {waiters}"
        + drains
    ]
    if st.ramp is not None:
        lines.append(ramp_line(st.name, st.ramp, now))
    rows = status_rows(st)
    if not rows:
        return lines
    tokens = [str(e.token) for _, _, e in rows]
    tw = max(5, *(len(t) for t in tokens))
    # a SLOTS column only when some entry holds job slots
    slots = [",".join(map(str, e.slots)) or "-" for _, _, e in rows]
    sw = max(5, *(len(s) for s in slots)) if any(e.slots for _, _, e in rows) else 0
    slot_head = f"  {'SLOTS':<{sw}}" if sw else ""
    lines.append(
        f"{'POS':>4}  {'STATE':<8} {'PERMITS':>7}  {'TOKEN':>{tw}}{slot_head}  {'AGE':>8}  OWNER"
    )
    for (pos, state, e), token, slot in zip(rows, tokens, slots, strict=True):
        age = format_age(now - e.since)
        cell = f"  {slot:<{sw}}" if sw else ""
        lines.append(
            f"{pos:>4}  {state:<8} {e.permits:>7}  {token:>{tw}}{cell}  {age:>8}  {e.owner}"
        )
    return lines


def dumps(doc: Any) -> str:
    return json.dumps(doc, sort_keys=False)
