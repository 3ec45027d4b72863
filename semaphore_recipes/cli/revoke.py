"""``revoke``: ask holders of a semaphore to give their permits back.

``revoke NAME (--token T | --owner O | --all)`` writes a revoke request on each picked
holder's entry: a holder watching its entry sees ``permit.revoke_requested`` (``run``
sends its command SIGTERM, then SIGKILL after its ``--grace``, and releases; ``hold``
turns unready and releases). ``--force`` then waits ``--grace`` seconds and removes the
entries still held, as a session's end would: their fenced writes fail, their ``lost``
fires, and the next waiters are granted. Exit 0 when a holder was asked, 67 when no
holder matched, 66 when there is no such semaphore; it never creates one.

Connection loss: a request the server does not answer within the request timeout
exits 69 (requests written before it stay: a request on an entry is harmless).
"""

from __future__ import annotations

import argparse
from typing import Any

from .._revoke import DEFAULT_GRACE
from ._common import CliError, ExitCode, check_name, connect, resolve_url
from ._name_argument import add_name_argument
from .run import non_negative_float


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "revoke",
        parents=parents,
        help="ask holders to give their permits back (--force: remove them after --grace)",
        description="Ask the holder of --token T, the holders of --owner O, or --all "
        "holders of NAME to release: run stops its command, hold turns unready and "
        "releases. --force removes the entries still held after --grace seconds.",
    )
    add_name_argument(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--token", type=int, metavar="T", help="the holder of fencing token T")
    which.add_argument("--owner", metavar="O", help="the holders whose owner string is O")
    which.add_argument("--all", action="store_true", help="every holder")
    p.add_argument(
        "--force",
        action="store_true",
        help="after --grace, remove the entries still held (their fences fail)",
    )
    p.add_argument(
        "--grace",
        type=non_negative_float,
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"with --force: seconds given to the holders first (default {DEFAULT_GRACE:g})",
    )
    p.set_defaults(handler=cmd_revoke)


def cmd_revoke(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    url, _ = resolve_url(args.url)
    backend = connect(url)
    try:
        sem = backend.semaphore(name, create=False)
        revoked = sem.revoke(
            token=args.token, owner=args.owner, all=args.all, force=args.force, grace=args.grace
        )
    finally:
        backend.close()
    if revoked.asked == 0:
        raise CliError(ExitCode.NO_SUCH_HOLDER, f"{name}: no holder matched: nothing revoked")
    removed = f"; {revoked.removed} removed after {args.grace:g} s" if args.force else ""
    print(f"{name}: {revoked.asked} holder(s) asked to release{removed}", flush=True)
    return 0
