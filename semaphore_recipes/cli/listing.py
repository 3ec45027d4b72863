"""``semaphore-recipes ls``: the semaphores stored in the namespace, with their capacity.

Reads the store's list of semaphores (``backend.list()``), writes nothing: read-only
credentials are enough. Connection loss: exit 69 when the store cannot be reached
within the request timeout (nothing is printed then).
"""

from __future__ import annotations

import argparse
from typing import Any

from ._common import connect, describe_url, dumps, resolve_url, say


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ls",
        parents=parents,
        help="the semaphores stored in the namespace, with their capacity",
        description="List the semaphores stored under the URL's namespace (root, prefix, "
        "schema), sorted by name, with their capacity. Read-only.",
    )
    p.add_argument("--json", action="store_true", help="one JSON document (for scripts)")
    p.set_defaults(handler=cmd_ls)


def cmd_ls(args: argparse.Namespace, command: list[str]) -> int:
    url, parsed = resolve_url(args.url)
    backend = connect(url)
    try:
        found = backend.list()
    finally:
        backend.close()
    if args.json:
        doc = {"semaphores": [{"name": s.name, "capacity": s.capacity} for s in found]}
        print(dumps(doc), flush=True)
        return 0
    if not found:
        say(f"no semaphores at {describe_url(parsed)}")
        return 0
    width = max(4, *(len(s.name) for s in found))
    lines = [f"{'NAME':<{width}}  CAPACITY"]
    lines += [f"{s.name:<{width}}  {s.capacity:>8}" for s in found]
    print("\n".join(lines), flush=True)
    return 0
