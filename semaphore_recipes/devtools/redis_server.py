"""Real ``redis-server`` processes, for development and tests.

One server on loopback, on a free port, in a work directory of its own. With
``persistent=True`` it writes an append-only file synced at every write
(``appendonly yes``, ``appendfsync always``: what docs/operations.md asks of a
production primary), so a restart keeps every entry, lease and counter.
``replica_of`` makes it a replica of another server (the ``WAIT`` tests); ``tls``
adds a TLS port beside the plain one (which the readiness check uses);
``cluster_node_timeout_ms`` makes it a Redis Cluster node (:mod:`.redis_cluster` joins
the nodes); ``extra_args`` go on its command line last (e.g. ``--auto-aof-rewrite-percentage
0``: an append-only file that is never rewritten). Only the
standard library is imported here. Process handling (log, start and stop, cleanup at
exit, dying with this process) is :class:`~semaphore_recipes.devtools.processes.ManagedProcess`'s.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from .processes import ManagedProcess, ServerNotFound, free_port
from .programs import ProgramNotFound, find_program

__all__ = ["RedisNotFound", "RedisServer", "find_redis_server"]

#: a cluster node's bus listens on its port + this; the port must leave room for it
CLUSTER_BUS_OFFSET = 10000
CLUSTER_HIGHEST_PORT = 65535 - CLUSTER_BUS_OFFSET

INSTALL_HINT = (
    "install Redis with `apt-get install -y redis-server` (Debian/Ubuntu, as root), "
    "or point the REDIS_SERVER_BINARY environment variable at a redis-server executable"
)


class RedisNotFound(ServerNotFound):
    """No redis-server binary; the message says how to install one."""


def find_redis_server() -> str:
    """The path of ``redis-server`` (:mod:`semaphore_recipes.devtools.programs`)."""
    try:
        return find_program("redis-server")
    except ProgramNotFound as exc:
        raise RedisNotFound(f"redis-server not found: {INSTALL_HINT}") from exc


class RedisServer(ManagedProcess):
    """One ``redis-server`` on 127.0.0.1 (``host_port``), its data in ``workdir``.

    The port and the data directory stay across :meth:`stop`/:meth:`kill` and
    :meth:`start`/:meth:`restart`: a persistent server comes back with its data.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        workdir: str | os.PathLike[str] | None = None,
        persistent: bool = False,
        replica_of: str | None = None,
        tls: tuple[str, str, str] | None = None,
        cluster_node_timeout_ms: int | None = None,
        extra_args: Sequence[str] = (),
        binary: str | None = None,
    ) -> None:
        self.binary = binary or find_redis_server()
        self.extra_args = tuple(extra_args)
        #: a Redis Cluster node (:mod:`.redis_cluster`): its bus is on port + 10000
        self.cluster_node_timeout_ms = cluster_node_timeout_ms
        cluster = cluster_node_timeout_ms is not None
        self.port = port or (
            free_port(highest=CLUSTER_HIGHEST_PORT, paired_offset=CLUSTER_BUS_OFFSET)
            if cluster
            else free_port()
        )
        self.persistent = persistent
        self.replica_of = replica_of
        #: (certificate, key, CA) files: also serve TLS on :attr:`tls_port`, clients
        #: presenting a certificate the CA signed
        self.tls = tls
        self.tls_port = free_port() if tls else None
        super().__init__(workdir=workdir, temp_prefix="redis-", log_name="redis.log")

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def label(self) -> str:
        return f"redis-server on {self.host_port}"

    def bound_ports(self) -> tuple[int, ...]:
        ports: tuple[int, ...] = (self.port,)
        if self.tls_port is not None:
            ports += (self.tls_port,)
        if self.cluster_node_timeout_ms is not None:
            ports += (self.port + CLUSTER_BUS_OFFSET,)
        return ports

    def command(self) -> list[str]:
        cmd = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.workdir),
            "--save", "",
            "--daemonize", "no",
            "--maxclients", "10000",
            # a replica's first sync starts at once (the default waits 5 s for others)
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if self.persistent:
            cmd += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            cmd += ["--appendonly", "no"]
        if self.replica_of:
            host, _, port = self.replica_of.rpartition(":")
            cmd += ["--replicaof", host, port]
        if self.cluster_node_timeout_ms is not None:
            cmd += ["--cluster-enabled", "yes",
                    "--cluster-config-file", str(self.workdir / "nodes.conf"),
                    "--cluster-node-timeout", str(self.cluster_node_timeout_ms)]  # fmt: skip
        if self.tls:
            cert, key, ca = self.tls
            cmd += ["--tls-port", str(self.tls_port), "--tls-cert-file", cert,
                    "--tls-key-file", key, "--tls-ca-cert-file", ca]  # fmt: skip
        return [*cmd, *self.extra_args]

    def probe_ready(self) -> str | None:
        reply = self.command_reply(b"PING")
        if reply != "+PONG":
            return None
        if self.replica_of:
            info = self.command_reply(b"INFO replication", whole=True) or ""
            return "replica" if "master_link_status:up" in info else None
        return "primary"

    def command_reply(self, command: bytes, *, whole: bool = False) -> str | None:
        """One inline command's reply (its first line, or all of a bulk reply with
        ``whole``); None when the server does not answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2.0) as sock:
                sock.sendall(command + b"\r\n")
                data = b""
                while not data.endswith(b"\r\n") or (whole and data.startswith(b"$")):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                    if whole and data.startswith(b"$"):
                        size, _, rest = data.partition(b"\r\n")
                        if len(rest) >= int(size[1:]) + 2:
                            break
        except OSError:
            return None
        return data.decode(errors="replace").strip() if data else None
