"""The ``semaphore-recipes`` command line.

    semaphore-recipes run NAME --capacity N [--permits K] [--timeout S] [--on-lost MODE] -- CMD...
    semaphore-recipes hold NAME --capacity N [--listen HOST:PORT] [--token-file PATH] [--on-lost M]
    semaphore-recipes status NAME [--json]
    semaphore-recipes watch NAME [--interval S] [--json]
    semaphore-recipes set-capacity NAME N [--ramp STEP/INTERVAL] | NAME (--resume | --cancel)
    semaphore-recipes ls [--json]
    semaphore-recipes delete NAME [--force]
    semaphore-recipes drain NAME [--wait [--timeout S]]
    semaphore-recipes resume NAME
    semaphore-recipes revoke NAME (--token T | --owner O | --all) [--force] [--grace S]
    semaphore-recipes exporter (NAME... | --all) [--listen HOST:PORT] [--min-interval S]
    semaphore-recipes dev-server [--backend etcd|zookeeper] [--port P]
    semaphore-recipes demo [--url URL]

``--url`` (``zookeeper://h1:2181,h2:2181/chroot?...`` or ``etcd://h1:2379/prefix?...``)
defaults to ``$SEMAPHORE_RECIPES_URL``; it and ``-v`` go before or after the subcommand.
A NAME starting with ``-`` is given as ``--name=-x`` (or after ``--`` where no command
follows: ``status -- -x``). One subcommand per module: :mod:`.run`,
:mod:`.hold`, :mod:`.status` (status, watch, set-capacity; :mod:`.ramp` its
ramps), :mod:`.listing` (ls),
:mod:`.delete`, :mod:`.drain` (drain, resume), :mod:`.revoke`, :mod:`.exporter`,
:mod:`.devserver`, :mod:`.demo`.
``docs/cli.md`` is the reference, with the exit codes (:class:`ExitCode`).

What happens on connection loss: ``run`` keeps waiting while disconnected; while CMD
runs, a lost connection only suspends the permit (a warning), and a *lost* permit
(session expired, lease gone, entry deleted) stops CMD with SIGTERM/SIGKILL and exits
76 (``--on-lost`` chooses: terminate, kill or ignore). ``status`` and ``set-capacity``
exit 69 when the server cannot be reached; ``watch`` marks its last table stale, retries.
``hold`` keeps waiting while disconnected; holding, a lost connection makes ``/readyz``
fail until the session is back, and a lost permit exits 76 (``--on-lost=exit``) or
leaves it unready. ``exporter`` reports ``status_up`` 0 for what it cannot read.
Expected failures print one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from ._common import ENV_URL, PROG, CliError, ExitCode, error_for, say, setup_logging
from ._name_argument import resolve_name

__all__ = ["ExitCode", "main"]

#: The subcommands that take a command after ``--`` (for the others ``--`` only ends
#: the options, so that a NAME may start with ``-``).
TAKE_A_COMMAND = frozenset({"run"})
#: The global options that take a value (skipped when looking for the subcommand).
_VALUED = frozenset({"--url", "-u"})


class _Parser(argparse.ArgumentParser):
    """Usage errors: one line on stderr and exit 64 (argparse itself exits 2)."""

    def error(self, message: str) -> NoReturn:
        say(f"{self.prog.removeprefix(PROG).strip() or 'usage'}: {message} (see {self.prog} -h)")
        raise SystemExit(int(ExitCode.USAGE))


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        "-u",
        metavar="URL",
        help=f"zookeeper://host:port[,...][/chroot] or etcd://host:port[,...][/prefix], "
        f"with ?session_timeout=S and TLS/auth parameters (default: ${ENV_URL})",
    )
    common.add_argument(
        "--verbose", "-v", action="count", default=0, help="more messages on stderr (-vv: debug)"
    )
    parser = _Parser(
        prog=PROG,
        description="Fair FIFO distributed counting semaphores on ZooKeeper, etcd and Redis.",
        epilog="docs/cli.md has the reference and the exit codes.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # the same options before the subcommand (after it, the subcommand's own win)
    parser.add_argument("--url", "-u", dest="global_url", metavar="URL", help="as below")
    parser.add_argument(
        "--verbose", "-v", dest="global_verbose", action="count", default=0, help="as below"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    from . import (
        delete,
        demo,
        devserver,
        drain,
        exporter,
        hold,
        listing,
        revoke,
        run,
        sql_schema,
        status,
    )

    run.add_parser(sub, [common])
    hold.add_parser(sub, [common])
    status.add_parsers(sub, [common])
    listing.add_parser(sub, [common])
    delete.add_parser(sub, [common])
    drain.add_parsers(sub, [common])
    revoke.add_parser(sub, [common])
    exporter.add_parser(sub, [common])
    devserver.add_parser(sub, [common])
    demo.add_parser(sub, [common])
    sql_schema.add_parser(sub, [common])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    args_list, command = _split_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(args_list)
        if extra and "--" in args_list:  # (kept for argparse: not a subcommand with one)
            command = extra
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else int(ExitCode.USAGE)
    if command and not getattr(args, "takes_command", False):
        say(f"{args.command}: takes no command after `--` (only a NAME: `{args.command} -- -x`)")
        return int(ExitCode.USAGE)
    if getattr(args, "url", None) is None:
        args.url = args.global_url
    args.verbose = getattr(args, "verbose", 0) + args.global_verbose
    try:
        resolve_name(args)
    except CliError as exc:
        say(exc.message)
        return int(exc.code)
    setup_logging(args.verbose)
    try:
        return int(args.handler(args, command))
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except Exception as exc:
        known = error_for(exc)
        if known is None:
            traceback.print_exc()
            say(f"internal error: {exc!r} (please report it)")
            return int(ExitCode.INTERNAL)
        say(known.message)
        return int(known.code)


def _split_command(args: list[str]) -> tuple[list[str], list[str]]:
    """(the arguments, the command after the first ``--``) for a subcommand that takes
    one; for the others the ``--`` stays, for argparse (a NAME after it may start
    with ``-``)."""
    if "--" not in args:
        return args, []
    cut = args.index("--")
    i = 0
    while i < cut and args[i].startswith("-"):  # the global options
        i += 2 if args[i] in _VALUED else 1
    if i < cut and args[i] not in TAKE_A_COMMAND:
        return args, []
    return args[:cut], args[cut + 1 :]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
