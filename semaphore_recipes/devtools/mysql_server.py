"""Real MariaDB servers, for development and tests.

One ``mariadbd`` on 127.0.0.1, on a free port, its data directory made once by
``mariadb-install-db`` (``root`` without a password, no test database) in a work
directory of its own, its Unix socket there too. No option file is read
(``--no-defaults``): the system's ``/etc/mysql`` cannot change what the tests get. The
binary log is on and row-based (``--log-bin``, ``--binlog-format=ROW``): a history of
every committed row change that the fault campaigns read. As root the server runs as
root (``--user=root``; it refuses otherwise). ``stop()`` is a clean shutdown (SIGTERM:
connections are ended, InnoDB flushes), ``kill()`` a crash (crash recovery at the next
start). Only the standard library is imported here; process handling is
:class:`~semaphore_recipes.devtools.processes.ManagedProcess`'s.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from urllib.parse import urlencode

from .processes import ManagedProcess, ServerNotFound, ServerStartError, free_port
from .programs import ProgramNotFound, find_program

__all__ = ["MariaDBNotFound", "MariaDBServer"]

#: the first byte of the server's greeting (handshake) packet: protocol version 10
HANDSHAKE_V10 = 0x0A
#: what MariaDB puts before its version in the greeting, for old MySQL clients
MARIADB_VERSION_PREFIX = "5.5.5-"


class MariaDBNotFound(ServerNotFound):
    """No MariaDB programs; the message says how to install them."""


class MariaDBServer(ManagedProcess):
    """One ``mariadbd`` on 127.0.0.1 (``host_port``), its data in ``workdir/data``.

    The port and the data stay across :meth:`stop`/:meth:`kill` and :meth:`start`/
    :meth:`restart`. ``settings``: more server options, ``{"max_connections": "500"}``
    for ``--max-connections=500`` (they override the defaults set here).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        workdir: str | os.PathLike[str] | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        try:
            self.mariadbd = find_program("mariadbd")
            self.install_db = find_program("mariadb-install-db")
        except ProgramNotFound as exc:
            raise MariaDBNotFound(str(exc)) from exc
        self.port = port or free_port()
        self.settings = dict(settings or {})
        super().__init__(workdir=workdir, temp_prefix="mariadb-", log_name="mariadbd.log")
        self.data_dir = self.workdir / "data"
        self.socket_path = self.workdir / "mariadbd.sock"
        self.binlog_base = self.workdir / "binlog"

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, database: str = "semaphore_recipes", **params: str) -> str:
        """A ``mysql://`` URL of this server as ``root`` (no password)."""
        query = f"?{urlencode(params)}" if params else ""
        return f"mysql://root@{self.host_port}/{database}{query}"

    @property
    def label(self) -> str:
        return f"mariadbd on {self.host_port}"

    def bound_ports(self) -> tuple[int, ...]:
        return (self.port,)

    def _as_root(self) -> list[str]:
        """mariadbd refuses to run as root unless told to."""
        return ["--user=root"] if os.geteuid() == 0 else []

    def prepare(self) -> None:
        """Make the data directory with ``mariadb-install-db`` at the first start."""
        if (self.data_dir / "mysql").is_dir():
            return
        cmd = [self.install_db, "--no-defaults", f"--datadir={self.data_dir}",
               *self._as_root(), "--auth-root-authentication-method=normal",
               "--skip-test-db"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=self.workdir)
        if done.returncode != 0:
            # a half-made data directory would be taken for a made one at the next start
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise ServerStartError(
                f"mariadb-install-db for {self.label} failed: "
                f"{(done.stderr or done.stdout).strip()}"
            )

    def command(self) -> list[str]:
        options = {
            "datadir": str(self.data_dir),
            "port": str(self.port),
            "bind-address": "127.0.0.1",
            "socket": str(self.socket_path),
            "pid-file": str(self.workdir / "mariadbd.pid"),
            "log-bin": str(self.binlog_base),
            "binlog-format": "ROW",
            "server-id": "1",
            "innodb-buffer-pool-size": "64M",
            # the redo log is written at each commit and synced once a second: a killed
            # server loses nothing (the kernel has the writes), only a machine crash would
            "innodb-flush-log-at-trx-commit": "2",
            "max-connections": "300",
            **{name.replace("_", "-"): value for name, value in self.settings.items()},
        }
        # --no-defaults must come first
        return [
            self.mariadbd,
            "--no-defaults",
            *self._as_root(),
            "--skip-name-resolve",
            *(f"--{name}={value}" for name, value in options.items()),
        ]

    def probe_ready(self) -> str | None:
        """The server's version once its port sends the greeting (handshake) packet.

        Sent only after the storage engines are up; the connection is then closed
        without logging in (the server logs it as aborted).
        """
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2.0) as sock:
                packet = b""
                while len(packet) < 4 or len(packet) < 4 + int.from_bytes(packet[:3], "little"):
                    chunk = sock.recv(4096)
                    if not chunk:
                        return None
                    packet += chunk
        except OSError:
            return None
        payload = packet[4:]
        if not payload or payload[0] != HANDSHAKE_V10:  # 0xFF: an error packet
            return None
        version = payload[1:].split(b"\0", 1)[0].decode(errors="replace")
        return version.removeprefix(MARIADB_VERSION_PREFIX)
