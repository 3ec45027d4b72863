"""The ``semaphore-recipes`` command line.

    semaphore-recipes run NAME --capacity N [--permits K] [--timeout S] [--on-lost MODE] -- CMD...
    semaphore-recipes hold NAME --capacity N [--listen HOST:PORT] [--token-file PATH] [--on-lost M]
    semaphore-recipes status NAME [--json]
    semaphore-recipes watch NAME [--interval S] [--json]
    semaphore-recipes set-capacity NAME N
    semaphore-recipes exporter NAME... [--listen HOST:PORT] [--min-interval S]
    semaphore-recipes dev-server [--backend etcd|zookeeper] [--port P]
    semaphore-recipes demo [--url URL]

``--url`` (``zookeeper://h1:2181,h2:2181/chroot?...`` or ``etcd://h1:2379/prefix?...``)
defaults to ``$SEMAPHORE_RECIPES_URL``. One subcommand per module: :mod:`.run`,
:mod:`.hold`, :mod:`.status` (status, watch, set-capacity), :mod:`.exporter`,
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

from ._common import ENV_URL, PROG, ExitCode, error_for, say, setup_logging

__all__ = ["ExitCode", "main"]


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
        description="Fair FIFO distributed counting semaphores on ZooKeeper and etcd.",
        epilog="docs/cli.md has the reference and the exit codes.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    from . import demo, devserver, exporter, hold, run, status

    run.add_parser(sub, [common])
    hold.add_parser(sub, [common])
    status.add_parsers(sub, [common])
    exporter.add_parser(sub, [common])
    devserver.add_parser(sub, [common])
    demo.add_parser(sub, [common])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args_list:
        cut = args_list.index("--")
        args_list, command = args_list[:cut], args_list[cut + 1 :]
    parser = build_parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else int(ExitCode.USAGE)
    if command and not getattr(args, "takes_command", False):
        say(f"{args.command}: takes no command after `--`")
        return int(ExitCode.USAGE)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
