"""From etcd endpoints to a gRPC channel's target, credentials and options.

No network I/O but the one-time resolution of host names (and the certificate files are
read), so an asyncio face can open a ``grpc.aio`` channel from the same
:class:`ChannelConfig`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

__all__ = ["ChannelConfig", "channel_config"]

DEFAULT_PORT = 2379
# seconds between HTTP/2 pings while a call is open (etcd refuses them more often than
# every 5 s), and how long a ping may go unanswered before the connection counts as dead
KEEPALIVE_TIME = 10.0
KEEPALIVE_TIMEOUT = 5.0


@dataclass(frozen=True)
class ChannelConfig:
    """Everything needed to open a (sync or aio) channel to an etcd cluster."""

    target: str
    credentials: grpc.ChannelCredentials | None
    options: tuple[tuple[str, Any], ...]


def _parse_endpoint(endpoint: str) -> tuple[str, int, bool]:
    """``host:port``, ``[v6]:port``, ``host``, optionally ``http://``/``https://``."""
    tls = False
    ep = endpoint.strip()
    for scheme in ("http://", "https://"):
        if ep.startswith(scheme):
            tls = scheme == "https://"
            ep = ep[len(scheme) :]
    ep = ep.rstrip("/")
    if not ep:
        raise ValueError(f"empty etcd endpoint: {endpoint!r}")
    if ep.startswith("["):
        host, _, rest = ep[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else DEFAULT_PORT
    elif ep.count(":") == 1:
        host, _, port_s = ep.partition(":")
        port = int(port_s)
    elif ep.count(":") > 1:  # bare IPv6 address without a port
        host, port = ep, DEFAULT_PORT
    else:
        host, port = ep, DEFAULT_PORT
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad etcd endpoint: {endpoint!r}")
    return host, port, tls


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


def _build_target(hosts: Sequence[tuple[str, int]]) -> tuple[str, str | None]:
    """Return (target, authority override) for one or several endpoints."""
    if len(hosts) == 1:
        host, port = hosts[0]
        return (f"[{host}]:{port}" if _ip_version(host) == 6 else f"{host}:{port}"), None
    versions = {_ip_version(h) for h, _ in hosts}
    if versions == {4}:
        return "ipv4:" + ",".join(f"{h}:{p}" for h, p in hosts), None
    if versions == {6}:
        return "ipv6:" + ",".join(f"[{h}]:{p}" for h, p in hosts), None
    # Host names: gRPC's multi-address targets take literal addresses only, so resolve
    # now (once) and keep the first name as the authority (TLS host name check).
    v4: list[str] = []
    v6: list[str] = []
    for host, port in hosts:
        if _ip_version(host) == 4:
            v4.append(f"{host}:{port}")
            continue
        if _ip_version(host) == 6:
            v6.append(f"[{host}]:{port}")
            continue
        for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            addr = str(sockaddr[0])
            if family == socket.AF_INET and f"{addr}:{port}" not in v4:
                v4.append(f"{addr}:{port}")
            elif family == socket.AF_INET6 and f"[{addr}]:{port}" not in v6:
                v6.append(f"[{addr}]:{port}")
    authority = next((h for h, _ in hosts if _ip_version(h) is None), None)
    if v4:
        return "ipv4:" + ",".join(v4), authority
    return "ipv6:" + ",".join(v6), authority


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as fh:
        return fh.read()


def channel_config(
    endpoints: Sequence[str],
    *,
    ca_cert: str | None = None,
    cert_key: str | None = None,
    cert_cert: str | None = None,
) -> ChannelConfig:
    """Build the target, credentials and channel options for ``endpoints``.

    Several endpoints become one channel with gRPC's multi-address target
    (``ipv4:h1:p1,h2:p2``): the channel connects to the first member that answers and
    moves to another when that connection breaks. Host names are resolved once, here.
    TLS is used when any of the certificate arguments is given or an endpoint starts
    with ``https://``. HTTP/2 keepalive pings (every ``KEEPALIVE_TIME`` s while a call
    is open; etcd refuses pings more often than every 5 s) detect a dead member under a
    long-lived stream, and reconnect backoff is capped at 2 s.
    """
    if not endpoints:
        raise ValueError("at least one etcd endpoint is needed")
    if (cert_key is None) != (cert_cert is None):
        raise ValueError("cert_key and cert_cert must be given together")
    parsed = [_parse_endpoint(ep) for ep in endpoints]
    tls = any(t for _, _, t in parsed) or any(x is not None for x in (ca_cert, cert_key, cert_cert))
    target, authority = _build_target([(h, p) for h, p, _ in parsed])
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", 2**31 - 1),
        ("grpc.max_send_message_length", 2**31 - 1),
        ("grpc.keepalive_time_ms", int(KEEPALIVE_TIME * 1000)),
        ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        # (not grpc.min_reconnect_backoff_ms: gRPC uses it as the connect timeout, and
        # etcd accepts TCP before it speaks HTTP/2 while it starts)
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
    ]
    if authority is not None and tls:
        options.append(("grpc.default_authority", authority))
    credentials = None
    if tls:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(ca_cert),
            private_key=_read(cert_key),
            certificate_chain=_read(cert_cert),
        )
    return ChannelConfig(target=target, credentials=credentials, options=tuple(options))
