"""Parsing of service URLs (``scheme://host:port,.../path?param=value``), no I/O.

Which schemes exist is the registry's business (``registry.py``); this module only
checks the syntax every backend shares."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from ._core.shown import quoted, quoted_url, redact_url
from .errors import InvalidName

DEFAULT_CONNECT_TIMEOUT = 15.0
DEFAULT_REQUEST_TIMEOUT = 5.0
#: The range of every duration parameter unless its backend narrows it. Longer than a
#: day is a mistake, and waits of much longer overflow the platform's timeouts.
MIN_SECONDS = 0.01
MAX_SECONDS = 86400.0
#: a host name (at most 253 characters, as DNS allows), an IPv4 or a bracketed IPv6
#: address (with a zone)
_HOST = re.compile(r"[A-Za-z0-9._-]{1,253}|\[[0-9A-Za-z:.%]{2,64}\]")


@dataclass(frozen=True)
class ServiceURL:
    """A parsed service URL, as a backend's ``from_url`` receives it."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    path: str  # where the backend keeps its semaphores (chroot, key prefix); "" when absent
    params: dict[str, str] = field(default_factory=dict)
    netloc: str = ""  # as written (a backend without hosts names its store here)

    def __repr__(self) -> str:  # (the parameters and the netloc may hold a password)
        return f"ServiceURL({self.redacted()!r})"

    def redacted(self) -> str:
        """The URL with its passwords and tokens replaced by ``***``, for people."""
        query = "&".join(f"{key}={value}" for key, value in self.params.items())
        return redact_url(
            f"{self.scheme}://{self.netloc}{self.path}" + (f"?{query}" if query else "")
        )

    @property
    def hosts_string(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.hosts)

    def seconds_param(
        self,
        key: str,
        default: float,
        *,
        minimum: float = MIN_SECONDS,
        maximum: float = MAX_SECONDS,
    ) -> float:
        """A duration parameter in seconds, checked against ``[minimum, maximum]``:
        ValueError naming the parameter and its range, before any I/O."""
        raw = self.params.get(key)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"URL parameter {key}={quoted(raw)} is not a number") from None
        if not (math.isfinite(value) and minimum <= value <= maximum):
            raise ValueError(
                f"URL parameter {key}={quoted(raw)} must be between {minimum:g} and "
                f"{maximum:g} seconds"
            )
        return value

    def connect_timeout(self) -> float:
        """``connect_timeout``: how long opening the backend may take."""
        return self.seconds_param("connect_timeout", DEFAULT_CONNECT_TIMEOUT)

    def request_timeout(self) -> float:
        """``request_timeout``: how long any one call other than a waiting acquire may
        take before it raises BackendUnavailable."""
        return self.seconds_param("request_timeout", DEFAULT_REQUEST_TIMEOUT)


def parse_url(url: str, default_port: int | None = None) -> ServiceURL:
    """Parse a service URL; raise ValueError naming what is wrong. With
    ``default_port`` None the URL names no hosts (``hosts`` is empty; ``netloc`` is kept
    as written), else every host gets ``default_port`` unless it names its own."""
    if not isinstance(url, str):
        raise TypeError(f"URL must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    shown = quoted_url(url)  # (an error names the URL without its secrets)
    if not parts.scheme:
        raise ValueError(f"URL {shown}: no scheme (e.g. etcd://host:2379)")
    hosts: list[tuple[str, int]] = []
    for item in parts.netloc.split(",") if default_port is not None else ():
        if not item:
            raise ValueError(f"URL {shown}: empty host")
        host, sep, port_s = item.rpartition(":")
        if not sep:
            host, port_s = item, str(default_port)
        if not _HOST.fullmatch(host):
            raise ValueError(f"URL {shown}: bad host {quoted(redact_url(item))}")
        try:
            port = int(port_s)
        except ValueError:
            raise ValueError(f"URL {shown}: bad port in {quoted(redact_url(item))}") from None
        if not 0 < port < 65536:
            raise ValueError(f"URL {shown}: port {port} out of range")
        hosts.append((host.strip("[]"), port))
    path = unquote(parts.path).rstrip("/")
    if path and (".." in path.split("/") or "\x00" in path):
        raise InvalidName(f"URL {shown}: bad path {quoted(path)}")
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    return ServiceURL(
        scheme=parts.scheme, hosts=tuple(hosts), path=path, params=params, netloc=parts.netloc
    )
