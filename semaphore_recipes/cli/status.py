"""``status``, ``watch`` and ``set-capacity``: look at a semaphore, change its capacity
(at once; ``--ramp``/``--resume``/``--cancel`` are :mod:`.ramp`'s).

None of them creates a semaphore: they open it with ``backend.semaphore(name,
create=False)``, which writes nothing and uses the stored capacity, so ``status`` and
``watch`` need only read permission. A name that is not stored gives "no such
semaphore" (exit 66; ``watch`` waits for it to appear); a refused read exits 77.

Connection loss: ``status`` and ``set-capacity`` fail with exit 69 when the server cannot
be reached (etcd requests are retried for up to 30 s first). ``watch`` (:mod:`.watch`)
keeps the last table marked stale, with since when the store has not answered, and
tries again at every refresh until it is stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from .._core.ramp import Ramp, parse_ramp
from ..errors import SemaphoreNotFound
from ._common import (
    CliError,
    ExitCode,
    check_name,
    connect,
    describe_url,
    dumps,
    resolve_url,
    status_json,
    status_table,
)
from ._name_argument import add_name_argument
from .ramp import set_capacity_by_ramp
from .run import non_negative_float, positive_int
from .watch import quiet_library, watch


def add_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "status",
        parents=parents,
        help="capacity, holders and waiters of a semaphore, in queue order",
        description="Show capacity, use, holders and waiters (queue order) with owner, "
        "permits, fencing token and age. Exits 66 if the semaphore does not exist.",
    )
    add_name_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON document (for scripts)")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser(
        "watch",
        parents=parents,
        help="the status, refreshed live (Ctrl-C ends it)",
        description="Show the status of NAME and refresh it until Ctrl-C (exit 0). "
        "On a terminal the table is redrawn in place; otherwise a new table is printed "
        "when something changed. Waits for NAME to be created if it does not exist.",
    )
    add_name_argument(p)
    p.add_argument(
        "--interval",
        "-n",
        type=non_negative_float,
        default=1.0,
        metavar="S",
        help="seconds between refreshes (default 1)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document per line, on change")
    p.set_defaults(handler=cmd_watch)

    p = sub.add_parser(
        "set-capacity",
        parents=parents,
        help="store a new capacity (waiters everywhere are woken), at once or in a ramp",
        description="Store a new capacity for an existing semaphore. Holders keep what "
        "they hold; after a decrease new grants wait until the use fits. Without --ramp "
        "it cancels any ramp under way. With --ramp STEP/INTERVAL the capacity moves "
        "towards N by STEP every INTERVAL (each step an ordinary capacity change; the "
        "plan is stored beside the capacity) and the command returns at the target; if "
        "it dies, --resume continues the stored plan and --cancel drops it.",
    )
    add_name_argument(p)
    p.add_argument("capacity", metavar="N", type=positive_int, nargs="?")
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--ramp",
        type=ramp_argument,
        metavar="STEP/INTERVAL",
        help="move by STEP permits every INTERVAL (e.g. 2/30s; units ms, s, m, h)",
    )
    how.add_argument(
        "--resume", action="store_true", help="continue the ramp stored for NAME (no N)"
    )
    how.add_argument(
        "--cancel",
        action="store_true",
        help="drop the ramp stored for NAME, keeping the capacity where it is (no N)",
    )
    p.set_defaults(handler=cmd_set_capacity, optional_after_name="capacity")


def ramp_argument(text: str) -> Ramp:
    try:
        return parse_ramp(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@contextlib.contextmanager
def _backend(url: str) -> Iterator[Any]:
    backend = connect(url)
    try:
        yield backend
    finally:
        backend.close()


def cmd_status(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    url, _ = resolve_url(args.url)
    with _backend(url) as backend:
        try:
            st = backend.semaphore(name, create=False).status()
        except SemaphoreNotFound:
            if args.json:  # a document for scripts too, then the error (exit 66)
                print(dumps({"name": name, "exists": False, "time": time.time()}), flush=True)
            raise
    now = time.time()
    if args.json:
        print(dumps({**status_json(st, now), "exists": True}), flush=True)
    else:
        print("\n".join(status_table(st, now)), flush=True)
    return 0


def cmd_set_capacity(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    if isinstance(args.capacity, str):  # (given after --name=NAME: not parsed yet)
        try:
            args.capacity = positive_int(args.capacity)
        except argparse.ArgumentTypeError as exc:
            raise CliError(ExitCode.USAGE, f"set-capacity: argument N: {exc}") from None
    plan_only = args.resume or args.cancel
    if plan_only and args.capacity is not None:
        raise CliError(ExitCode.USAGE, "--resume and --cancel take no capacity N")
    if not plan_only and args.capacity is None:
        raise CliError(ExitCode.USAGE, "the new capacity N is required")
    url, _ = resolve_url(args.url)
    if args.ramp is not None or plan_only:
        return set_capacity_by_ramp(url, name, args.capacity, args.ramp, args.cancel)
    with _backend(url) as backend:
        sem = backend.semaphore(name, create=False)
        old = sem.capacity
        sem.set_capacity(args.capacity)
        used = sem.status().used
    note = ""
    if used > args.capacity:
        note = f" ({used} in use: holders keep them; new grants wait until the use fits)"
    print(f"{name}: capacity {old} -> {args.capacity}{note}", flush=True)
    return 0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def cmd_watch(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    url, parsed = resolve_url(args.url)
    tty = sys.stdout.isatty()
    log = quiet_library(args.verbose, tty and not args.json)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with _backend(url) as backend:
            watch(backend, name, describe_url(parsed), args.interval, args.json, tty, log)
    except KeyboardInterrupt:
        if tty and not args.json:
            print(flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0  # pragma: no cover - the loop only ends by an interrupt
