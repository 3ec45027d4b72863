"""``semaphore-recipes sql-schema``: the PostgreSQL tables and functions, for a migration tool.

The PostgreSQL backend makes its schema on first use when its role may; a role without
the right (docs/operations.md: a least-privilege role) needs it made by the schema's
owner, with this output (``psql -f``, Flyway, Alembic's ``op.execute``). It is
idempotent and records its version in ``<schema>.schema_version``. No I/O.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InvalidName
from ..postgresql.params import DEFAULT_SCHEMA, valid_schema
from ..postgresql.schema import SCHEMA_VERSION, schema_sql
from ._common import CliError, ExitCode


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sql-schema",
        parents=parents,
        help="print the PostgreSQL schema (tables and functions) for a migration tool",
        description="Print the SQL that makes the PostgreSQL backend's schema "
        f"(version {SCHEMA_VERSION}): idempotent, for psql -f or a migration tool.",
    )
    p.add_argument(
        "--schema",
        default=DEFAULT_SCHEMA,
        metavar="NAME",
        help=f"the schema the URL's ?schema= names (default {DEFAULT_SCHEMA})",
    )
    p.set_defaults(handler=cmd_sql_schema)


def cmd_sql_schema(args: argparse.Namespace, command: list[str]) -> int:
    try:
        schema = valid_schema(args.schema)
    except InvalidName as exc:
        raise CliError(ExitCode.USAGE, str(exc)) from None
    print(schema_sql(schema), end="")
    return 0
