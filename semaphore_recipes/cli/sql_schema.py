"""``semaphore-recipes sql-schema``: a SQL backend's tables and routines, for a migration tool.

The PostgreSQL and MySQL backends make their schema on first use when their user may; a
user without the right (docs/operations.md: a least-privilege role) needs it made by
the owner, with this output (``psql -f``, ``mysql DB <``, Flyway, Alembic's
``op.execute``). It is idempotent and records its version. No I/O.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InvalidName
from ..mysql import schema as mysql_schema
from ..postgresql.params import DEFAULT_SCHEMA, valid_schema
from ..postgresql.schema import SCHEMA_VERSION, schema_sql
from ._common import CliError, ExitCode


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sql-schema",
        parents=parents,
        help="print a SQL backend's schema (tables and routines) for a migration tool",
        description="Print the SQL that makes the PostgreSQL backend's schema "
        f"(version {SCHEMA_VERSION}), or with --dialect mysql the MySQL backend's "
        f"(version {mysql_schema.SCHEMA_VERSION}, for the mysql client): idempotent.",
    )
    p.add_argument(
        "--dialect",
        choices=("postgresql", "mysql"),
        default="postgresql",
        help="whose schema (default postgresql)",
    )
    p.add_argument(
        "--schema",
        default=DEFAULT_SCHEMA,
        metavar="NAME",
        help=f"(postgresql) the schema the URL's ?schema= names (default {DEFAULT_SCHEMA}); "
        "MySQL's tables go in the database the URL names",
    )
    p.set_defaults(handler=cmd_sql_schema)


def cmd_sql_schema(args: argparse.Namespace, command: list[str]) -> int:
    if args.dialect == "mysql":
        print(mysql_schema.schema_script(), end="")
        return 0
    try:
        schema = valid_schema(args.schema)
    except InvalidName as exc:
        raise CliError(ExitCode.USAGE, str(exc)) from None
    print(schema_sql(schema), end="")
    return 0
