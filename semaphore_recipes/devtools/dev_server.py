"""A started development server: what ``semaphore-recipes dev-server`` and ``demo`` run.

Each store's launcher module beside this one (``zookeeper_server``, ``etcd_server``)
offers ``start_dev_server(port)``, which starts one server on 127.0.0.1 (``port`` None:
any free one) with its data in a temporary directory and returns a :class:`DevServer`;
:mod:`.launchers` finds that function by URL scheme. Development only: one node,
loopback, no fsync.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .processes import ManagedProcess

__all__ = ["DevServer"]


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
