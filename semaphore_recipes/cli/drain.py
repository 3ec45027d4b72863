"""``drain`` and ``resume``: refuse new work on a semaphore while its holders finish.

``drain NAME`` stores the drain flag beside the capacity: new acquires everywhere fail
at once (``run`` and ``hold`` exit 79) and waiters already queued are told the same
and leave; holders keep their permits. ``--wait`` then returns once the last holder
released (exit 75 after ``--timeout``: the semaphore stays draining). ``resume NAME``
clears the flag. Neither creates a semaphore (exit 66 if there is none).

Connection loss: a write or read the server does not answer within the request
timeout exits 69 (the flag may still have been written); ``--wait`` polls the status
and ends the same way if the server stops answering.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._common import CliError, ExitCode, check_name, connect, resolve_url
from ._name_argument import add_name_argument
from .run import non_negative_float


def add_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "drain",
        parents=parents,
        help="refuse new acquires while the holders finish (resume ends it)",
        description="Put NAME in the draining state: new acquires fail at once (run "
        "and hold exit 79), waiters are told and leave, holders keep their permits.",
    )
    add_name_argument(p)
    p.add_argument("--wait", action="store_true", help="return once the last holder released")
    p.add_argument(
        "--timeout",
        "-t",
        type=non_negative_float,
        default=None,
        metavar="S",
        help="with --wait: give up after S seconds (exit 75; it stays draining)",
    )
    p.set_defaults(handler=cmd_drain)

    p = sub.add_parser(
        "resume",
        parents=parents,
        help="end the draining state: acquires are granted again",
        description="Clear the drain flag of NAME: acquires are granted again.",
    )
    add_name_argument(p)
    p.set_defaults(handler=cmd_resume)


def cmd_drain(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    if args.timeout is not None and not args.wait:
        raise CliError(ExitCode.USAGE, "drain: --timeout needs --wait")
    url, _ = resolve_url(args.url)
    backend = connect(url)
    try:
        sem = backend.semaphore(name, create=False)
        drained = sem.drain(wait=args.wait, timeout=args.timeout)
        holders = len(sem.status().holders) if drained is None else 0
    finally:
        backend.close()
    if args.wait:
        print(f"{name}: draining, no holder left", flush=True)
    else:
        print(f"{name}: draining ({holders} holder(s) left)", flush=True)
    return 0


def cmd_resume(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    url, _ = resolve_url(args.url)
    backend = connect(url)
    try:
        backend.semaphore(name, create=False).resume()
    finally:
        backend.close()
    print(f"{name}: resumed", flush=True)
    return 0
