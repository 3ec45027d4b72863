"""Throwaway servers for development: what ``semaphore-recipes dev-server`` and ``demo`` run.

Each backend's ``server`` module offers ``start_dev_server(port)``, which starts one
server on 127.0.0.1 (``port`` None: any free one) with its data in a temporary directory
and returns a :class:`DevServer`. :func:`dev_server_launcher` finds that function by URL
scheme, importing only the module of that backend. Development only: one node, loopback,
no fsync.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ._process import ManagedProcess

__all__ = ["DEV_SERVERS", "DevServer", "dev_server_launcher"]

#: URL scheme -> ``"module:function"`` of the backend's dev-server launcher.
DEV_SERVERS: dict[str, str] = {
    "etcd": "semaphore_recipes.etcd.server:start_dev_server",
    "zookeeper": "semaphore_recipes.zookeeper.server:start_dev_server",
}


@dataclass(frozen=True)
class DevServer:
    """A started development server.

    Clients of it see connection loss when it stops, like for any server going down
    (their permits are suspended, then lost); nothing here reconnects or restarts it.
    """

    process: ManagedProcess
    url: str  #: e.g. ``"etcd://127.0.0.1:2379"``
    data_dir: Path  #: the temporary directory :meth:`close` removes
    description: str  #: e.g. ``"etcd 3.4 (/usr/bin/etcd) on 127.0.0.1:2379"``

    @property
    def running(self) -> bool:
        """False once the server process has exited (by itself or after close)."""
        return self.process.running

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the server's log."""
        return self.process.log_tail(lines)

    def close(self) -> None:
        """Kill the server and remove its data directory. Idempotent."""
        self.process.close()


def dev_server_launcher(scheme: str) -> Callable[[int | None], DevServer]:
    """The ``start_dev_server`` of the backend named by ``scheme`` (a key of
    :data:`DEV_SERVERS`); ValueError, naming the known schemes, for any other."""
    try:
        target = DEV_SERVERS[scheme]
    except KeyError:
        known = ", ".join(sorted(DEV_SERVERS))
        raise ValueError(f"no dev server for {scheme!r} (known: {known})") from None
    module_name, _, function = target.partition(":")
    launcher = getattr(importlib.import_module(module_name), function)
    return cast("Callable[[int | None], DevServer]", launcher)
