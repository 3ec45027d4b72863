"""Real PostgreSQL servers, for development and tests.

One ``postgres`` on 127.0.0.1, on a free port, its data directory made by ``initdb``
(trust authentication for loopback, the superuser ``postgres``) in a work directory of
its own; TCP only (no Unix socket). PostgreSQL refuses to run as root: as root, both
programs run as the ``postgres`` user Debian's package makes (``setpriv``), and the
work directory is handed to that user. ``stop()`` is a *fast* shutdown (SIGINT: open
connections are ended, data is checkpointed), :meth:`PostgreSQLServer.stop_immediate`
an *immediate* one (SIGQUIT: no checkpoint, crash recovery at the next start), and
``kill()`` a crash. ``logical=True`` sets ``wal_level=logical`` (logical decoding with
``test_decoding``). Only the standard library is imported here; process handling is
:class:`~semaphore_recipes.devtools.processes.ManagedProcess`'s.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
from collections.abc import Mapping

from .processes import ManagedProcess, ServerNotFound, ServerStartError, free_port
from .programs import ProgramNotFound, find_program

__all__ = ["PostgreSQLNotFound", "PostgreSQLServer"]

#: the OS user that runs the server when this process is root (Debian's package makes it)
SERVER_USER = "postgres"


class PostgreSQLNotFound(ServerNotFound):
    """No PostgreSQL programs; the message says how to install them."""


class PostgreSQLServer(ManagedProcess):
    """One ``postgres`` on 127.0.0.1 (``host_port``), its data in ``workdir/data``.

    The port and the data stay across :meth:`stop`/:meth:`kill` and :meth:`start`/
    :meth:`restart`. ``settings``: more ``-c name=value`` options.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        workdir: str | os.PathLike[str] | None = None,
        logical: bool = False,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        try:
            self.postgres = find_program("postgres")
            self.initdb = find_program("initdb")
            self.pg_isready = find_program("pg_isready")
        except ProgramNotFound as exc:
            raise PostgreSQLNotFound(str(exc)) from exc
        self.port = port or free_port()
        self.logical = logical
        self.settings = dict(settings or {})
        super().__init__(workdir=workdir, temp_prefix="postgresql-", log_name="postgres.log")
        self.data_dir = self.workdir / "data"

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, dbname: str = "postgres", **params: str) -> str:
        """A ``postgresql://`` URL of this server as its superuser."""
        query = "&".join(f"{k}={v}" for k, v in {"user": "postgres", **params}.items())
        return f"postgresql://{self.host_port}/{dbname}?{query}"

    @property
    def label(self) -> str:
        return f"postgres on {self.host_port}"

    def bound_ports(self) -> tuple[int, ...]:
        return (self.port,)

    def _as_server_user(self, cmd: list[str]) -> list[str]:
        """``cmd`` run as the server's user when this process is root. The change of
        user clears the parent-death signal the spawn set (from the main thread only):
        ``--pdeathsig keep`` sets it again as it was."""
        if os.geteuid() != 0:
            return cmd
        setpriv = find_program("setpriv")
        return [
            setpriv, f"--reuid={SERVER_USER}", f"--regid={SERVER_USER}", "--init-groups",
            "--pdeathsig", "keep", *cmd,
        ]  # fmt: skip

    def prepare(self) -> None:
        """Make the data directory with ``initdb`` at the first start."""
        if (self.data_dir / "PG_VERSION").exists():
            return
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam(SERVER_USER)
            except KeyError:
                raise PostgreSQLNotFound(
                    f"no {SERVER_USER!r} user to run PostgreSQL as (it refuses root): "
                    "install Debian's postgresql package, which makes it"
                ) from None
            os.chown(self.workdir, user.pw_uid, user.pw_gid)
        cmd = [self.initdb, "-D", str(self.data_dir), "-U", "postgres", "-A", "trust",
               "-E", "UTF8", "--no-sync", "--no-instructions"]  # fmt: skip
        done = subprocess.run(
            self._as_server_user(cmd), capture_output=True, text=True, cwd=self.workdir
        )
        if done.returncode != 0:
            raise ServerStartError(f"initdb for {self.label} failed: {done.stderr.strip()}")

    def command(self) -> list[str]:
        options = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": "",
            "fsync": "off",
            "max_connections": "300",
            **(
                {"wal_level": "logical", "max_replication_slots": "8", "max_wal_senders": "8"}
                if self.logical
                else {}
            ),
            **self.settings,
        }
        cmd = [self.postgres, "-D", str(self.data_dir), "-p", str(self.port)]
        for name, value in options.items():
            cmd += ["-c", f"{name}={value}"]
        return self._as_server_user(cmd)

    def probe_ready(self) -> str | None:
        try:
            done = subprocess.run(
                [self.pg_isready, "-h", "127.0.0.1", "-p", str(self.port), "-t", "1"],
                capture_output=True,
                timeout=5,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return "accepting" if done.returncode == 0 else None

    def terminate(self) -> None:
        """A fast shutdown (SIGINT): the default SIGTERM would wait for every client."""
        self._signal(signal.SIGINT)

    def stop_immediate(self, timeout: float = 10.0) -> None:
        """An immediate shutdown (SIGQUIT): no checkpoint; the next start recovers."""
        self._signal(signal.SIGQUIT)
        self.wait_stopped(timeout)

    def _signal(self, signum: int) -> None:
        pid = self.pid
        if pid is not None and self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
                if self.paused:
                    os.kill(pid, signal.SIGCONT)
