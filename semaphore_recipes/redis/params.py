"""What a ``redis://``, ``rediss://``, ``redis+sentinel://``, ``redis+cluster://`` (or
their TLS forms) URL says, checked before any I/O.

``redis://[user:password@]host[:port][/db]?prefix=P&session_timeout=S`` and
``rediss://`` (TLS, with ``ca``, ``cert``, ``key`` as for etcd);
``redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]?...``
names the sentinels (port 26379 unless given) and the service they watch, and the
user and password are the data nodes' (sentinels that require their own:
``sentinel_username``, ``sentinel_password``); ``rediss+sentinel://`` speaks TLS to the
data nodes and the sentinels alike.
``redis+cluster://[user:password@]host:port[,host:port...]?prefix=P`` (and
``rediss+cluster://``) for Redis Cluster, the nodes the client starts from. The
parameters are listed in docs/operations.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import redis.asyncio.cluster
import redis.cluster

from .._core.shown import quoted
from ..backend import ServiceURL
from ..errors import InvalidName

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_PREFIX",
    "DEFAULT_SENTINEL_PORT",
    "SENTINEL_PARAMETERS",
    "SENTINEL_SCHEMES",
    "URL_PARAMETERS",
    "RedisParams",
]

DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_PREFIX = "semaphore_recipes"
DEFAULT_SESSION_TIMEOUT = 10.0
#: a lease renewed every third of its TTL must survive a scheduling hiccup
MIN_SESSION_TIMEOUT = 1.0
URL_PARAMETERS = frozenset(
    {
        "prefix",
        "session_timeout",
        "connect_timeout",
        "request_timeout",
        "ca",
        "cert",
        "key",
        "wait_replicas",
    }
)
#: what a ``redis+sentinel://`` URL takes besides
SENTINEL_PARAMETERS = frozenset({"sentinel_username", "sentinel_password"})
SENTINEL_SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})
CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})
TLS_SCHEMES = frozenset({"rediss", "rediss+sentinel", "rediss+cluster"})
_PREFIX = re.compile(r"[A-Za-z0-9._/-]{1,128}")
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")
#: a Sentinel service (master) name, as ``sentinel monitor`` takes it
_SERVICE = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True)
class RedisParams:
    """A parsed Redis URL: where the server is, who we are, and the backend's settings."""

    host: str
    port: int
    db: int
    username: str | None
    password: str | None = field(repr=False)
    tls: bool
    ca: str | None
    cert: str | None
    key: str | None
    prefix: str
    session_timeout: float
    connect_timeout: float
    request_timeout: float
    #: replicas that must acknowledge a grant before acquire returns (``WAIT``); 0: none
    wait_replicas: int
    #: through Sentinel: the sentinels asked for the primary of ``service`` (``host``
    #: and ``port`` are then the first sentinel's); empty for one server
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    #: Redis Cluster (``redis+cluster://``): ``nodes`` are where the client starts
    cluster: bool = False
    nodes: tuple[tuple[str, int], ...] = ()

    @property
    def address(self) -> str:
        """The server, or the sentinels and the service they name."""
        if self.sentinels:
            listed = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"sentinels {listed}, service {self.service}"
        return f"{self.host}:{self.port}"

    @property
    def contacts(self) -> list[tuple[str, int]]:
        """The addresses a client opens first: the server's, the sentinels', or the
        cluster nodes' the URL names."""
        return list(self.sentinels) or list(self.nodes) or [(self.host, self.port)]

    @classmethod
    def from_url(cls, url: ServiceURL) -> RedisParams:
        """ValueError (InvalidName for a bad prefix) naming what is wrong; no I/O."""
        sentinel = url.scheme in SENTINEL_SCHEMES
        known = URL_PARAMETERS | SENTINEL_PARAMETERS if sentinel else URL_PARAMETERS
        unknown = sorted(set(url.params) - known)
        if unknown:
            raise ValueError(
                f"{url.scheme} URL parameter(s) {', '.join(unknown)} not understood; "
                f"known: {', '.join(sorted(known))}"
            )
        tls = url.scheme in TLS_SCHEMES
        cluster = url.scheme in CLUSTER_SCHEMES
        if not tls and any(p in url.params for p in ("ca", "cert", "key")):
            raise ValueError(
                "ca, cert and key are TLS parameters: use a rediss:// (rediss+sentinel://, "
                "rediss+cluster://) URL"
            )
        if ("cert" in url.params) != ("key" in url.params):
            raise ValueError("a client certificate needs both cert and key")
        if "@" in url.path:  # (not echoed: the rest of the password is before it)
            raise ValueError(
                "the redis URL has an '@' after its host: percent-encode '/', '?', '#' "
                "and '@' in the user and the password (%2F, %3F, %23, %40)"
            )
        userinfo, _, hostport = url.netloc.rpartition("@")
        username: str | None = None
        password: str | None = None
        if userinfo:
            user, sep, secret = userinfo.partition(":")
            username = unquote(user) or None
            password = unquote(secret) if sep else None
        sentinels: tuple[tuple[str, int], ...] = ()
        nodes: tuple[tuple[str, int], ...] = ()
        service = ""
        db_path = url.path
        if sentinel:
            sentinels = tuple(
                _host_port(item, DEFAULT_SENTINEL_PORT) for item in hostport.split(",")
            )
            service, _, db_path = url.path.strip("/").partition("/")
            if not _SERVICE.fullmatch(service):
                raise ValueError(
                    f"a {url.scheme} URL names the sentinels' service after the hosts "
                    f"({url.scheme}://host:26379,host:26379/mymaster[/db]); "
                    f"got {quoted(service)}"
                )
            host, port = sentinels[0]
        elif cluster:
            nodes = tuple(_host_port(item, DEFAULT_PORT) for item in hostport.split(","))
            host, port = nodes[0]
            if url.path:
                raise ValueError(
                    "a Redis Cluster has one database: no path after the nodes "
                    f"({quoted(url.path)})"
                )
        elif "," in hostport:
            raise ValueError(
                "a redis URL names one server (the primary); several sentinels: "
                "redis+sentinel://host:26379,host:26379/service; a cluster's nodes: "
                "redis+cluster://host:6379,host:6379"
            )
        else:
            host, port = _host_port(hostport, DEFAULT_PORT)
        db = 0
        if db_path:
            try:
                db = int(db_path.strip("/"))
            except ValueError:
                shown = quoted(db_path)
                raise ValueError(f"redis URL path {shown} is not a database number") from None
            if db < 0:
                raise ValueError(f"redis database {db} is negative")
        prefix = url.params.get("prefix", DEFAULT_PREFIX)
        if not _PREFIX.fullmatch(prefix):
            raise InvalidName(
                f"invalid redis key prefix {quoted(prefix)}: up to 128 characters from "
                "A-Z a-z 0-9 . _ / -"
            )
        raw_replicas = url.params.get("wait_replicas", "0")
        try:
            wait_replicas = int(raw_replicas)
        except ValueError:
            raise ValueError(f"wait_replicas={quoted(raw_replicas)} is not a number") from None
        if not 0 <= wait_replicas <= 100:
            raise ValueError(f"wait_replicas={wait_replicas} must be between 0 and 100")
        return cls(
            host=host,
            port=port,
            db=db,
            username=username,
            password=password,
            tls=tls,
            ca=url.params.get("ca"),
            cert=url.params.get("cert"),
            key=url.params.get("key"),
            prefix=prefix,
            session_timeout=url.seconds_param(
                "session_timeout", DEFAULT_SESSION_TIMEOUT, minimum=MIN_SESSION_TIMEOUT
            ),
            connect_timeout=url.connect_timeout(),
            request_timeout=url.request_timeout(),
            wait_replicas=wait_replicas,
            sentinels=sentinels,
            service=service,
            sentinel_username=url.params.get("sentinel_username") or None,
            sentinel_password=url.params.get("sentinel_password"),
            cluster=cluster,
            nodes=nodes,
        )

    def client_options(self) -> dict[str, object]:
        """Keyword arguments of ``redis.Redis`` / ``redis.asyncio.Redis``: no retries of
        the client's own (the programs decide what may be sent again), every call
        bounded by the request timeout."""
        options: dict[str, object] = dict(
            host=self.host,
            port=self.port,
            db=self.db,
            username=self.username,
            password=self.password,
            socket_timeout=self.request_timeout,
            socket_connect_timeout=self.connect_timeout,
        )
        if self.tls:
            options.update(
                ssl=True, ssl_ca_certs=self.ca, ssl_certfile=self.cert, ssl_keyfile=self.key
            )
        return options

    def cluster_options(self, *, asyncio: bool = False) -> dict[str, Any]:
        """Keyword arguments of ``redis.RedisCluster`` (``redis.asyncio.RedisCluster``):
        the startup nodes, the same credentials, timeouts and TLS as
        :meth:`client_options`, and the cluster's errors left to the programs too (a
        call that meets a failover fails, and :func:`.calls.call` sends it again; the
        client maps the slots again on its next call)."""
        options = self.client_options()
        for single in ("host", "port", "db"):
            options.pop(single)
        node_type = redis.asyncio.cluster.ClusterNode if asyncio else redis.cluster.ClusterNode
        options.update(
            startup_nodes=[node_type(host, port) for host, port in self.nodes],
            require_full_coverage=False,  # (a slot not served fails alone, not every call)
        )
        return options

    def sentinel_options(self, retry: object) -> dict[str, object]:
        """Keyword arguments of the sentinels' clients (``sentinel_kwargs``): their own
        user and password, the same timeouts and TLS as the data nodes', and
        ``retry`` (none of redis-py's own)."""
        options: dict[str, object] = dict(
            username=self.sentinel_username,
            password=self.sentinel_password,
            socket_timeout=self.request_timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=retry,
        )
        if self.tls:
            options.update(
                ssl=True, ssl_ca_certs=self.ca, ssl_certfile=self.cert, ssl_keyfile=self.key
            )
        return options


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    if not text:
        raise ValueError("a redis URL names a host (redis://host:6379)")
    host, sep, port_s = text.rpartition(":")
    if not sep or host.endswith(":") or ("[" in text and not host.endswith("]")):
        host, port_s = text, str(default_port)
    if not _HOST.fullmatch(host):
        raise ValueError(f"bad redis host {quoted(host)}")
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"bad redis port {quoted(port_s)}") from None
    if not 0 < port < 65536:
        raise ValueError(f"redis port {port} out of range")
    return host.strip("[]"), port
