"""``semaphore-recipes delete NAME [--force]``: remove a semaphore from the store.

Reads the semaphore's status first and refuses (exit 73) while anyone holds or waits,
unless ``--force``; then deletes what is stored of it (its capacity, its entries and its
data keys: ``backend.delete_semaphore``). The check and the delete are two requests: an
acquire that arrives between them loses its entry with the semaphore (a holder's
fenced write then fails; a waiter creates the semaphore again, with its capacity).
Connection loss: exit 69 when the store cannot be reached within the request timeout
(a delete that got no answer may still be applied).
"""

from __future__ import annotations

import argparse
from typing import Any

from ._common import CliError, ExitCode, check_name, connect, resolve_url
from ._name_argument import add_name_argument


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "delete",
        parents=parents,
        help="delete a semaphore (refused while anyone holds or waits, unless --force)",
        description="Delete what is stored of semaphore NAME: capacity, entries, data "
        "keys. Refused (exit 73) while it has holders or waiters, unless --force; exit "
        "66 if it does not exist.",
    )
    add_name_argument(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="delete it even with holders or waiters (their entries go: a holder's "
        "fenced writes fail from then on)",
    )
    p.set_defaults(handler=cmd_delete)


def cmd_delete(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    url, _ = resolve_url(args.url)
    backend = connect(url)
    try:
        st = backend.status(name)  # SemaphoreNotFound: exit 66
        users = _users(len(st.holders), len(st.waiters))
        if users and not args.force:
            raise CliError(
                ExitCode.IN_USE,
                f"semaphore {name!r} has {users}: not deleted (--force deletes it anyway)",
            )
        backend.delete_semaphore(name)
    finally:
        backend.close()
    print(f"deleted {name!r}" + (f" and the entries of its {users}" if users else ""), flush=True)
    return 0


def _users(holders: int, waiters: int) -> str:
    said = [
        f"{n} {what}{'' if n == 1 else 's'}"
        for n, what in ((holders, "holder"), (waiters, "waiter"))
        if n
    ]
    return " and ".join(said)
