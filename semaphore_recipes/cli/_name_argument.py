"""The semaphore NAME of a subcommand: a positional, or ``--name=NAME``.

A name may start with ``-`` (``-x`` is valid for the library), which argparse would
take for an option: ``--name=-x`` gives it to any subcommand, and ``-- -x`` to those
that take no command after ``--`` (``status -- -x``, ``set-capacity -- -x 3``).
"""

from __future__ import annotations

import argparse

from ._common import CliError, ExitCode


def add_name_argument(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """NAME, positional or ``--name``. A subcommand whose positional after NAME is
    optional names it in ``set_defaults(optional_after_name=DEST)``: with ``--name``, a
    lone positional is that one."""
    p.add_argument("name", metavar="NAME", nargs="?", help=help)
    p.add_argument(
        "--name",
        dest="name_option",
        metavar="NAME",
        help="the semaphore NAME as an option: --name=-x for a name starting with '-'",
    )


def resolve_name(args: argparse.Namespace) -> None:
    """``args.name`` from the positional or ``--name`` (exactly one; before any I/O)."""
    if not hasattr(args, "name_option"):
        return
    given, option = args.name, args.name_option
    shifted = getattr(args, "optional_after_name", None)
    if given is not None and option is not None and shifted and getattr(args, shifted) is None:
        # (``set-capacity --name=-x 4``: the one positional is the optional one after
        # NAME, as text: its handler checks it)
        setattr(args, shifted, given)
        given = None
    if given is not None and option is not None:
        raise CliError(ExitCode.USAGE, f"{args.command}: NAME given twice ({given!r}, --name)")
    if given is None and option is None:
        raise CliError(ExitCode.USAGE, f"{args.command}: NAME is required (or --name=NAME)")
    args.name = option if given is None else given
