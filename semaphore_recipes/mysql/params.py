"""What a ``mysql://`` URL says, checked before any I/O.

``mysql://user:password@host:port/dbname?session_timeout=T``: the library's tables and
procedures live in ``dbname`` (named ``sr_*``; ``semaphore_recipes`` when the URL names
none). The library's parameters are
``session_timeout``, ``connect_timeout`` and ``request_timeout``; the TLS parameters
(:data:`TLS_PARAMETERS`) are given to the driver (PyMySQL) as they are. A URL without a
TLS parameter connects without TLS. docs/operations.md lists them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from ..backend import ServiceURL, quoted, redact_url

__all__ = ["DEFAULT_DATABASE", "DEFAULT_PORT", "MySQLParams"]

DEFAULT_PORT = 3306
#: the database of a URL that names none
DEFAULT_DATABASE = "semaphore_recipes"
DEFAULT_SESSION_TIMEOUT = 10.0
#: a session renewed every third of its timeout must survive a scheduling hiccup
MIN_SESSION_TIMEOUT = 1.0
#: how long a client's connection may be gone (a reconnect) before its held entries are
#: dead for every admission; never more than a third of the session timeout
ORPHAN_GRACE = 1.0
OUR_PARAMETERS = frozenset(
    {"session_timeout", "connect_timeout", "request_timeout", "user", "password"}
)
#: PyMySQL's TLS parameters a URL may carry (paths and flags)
TLS_PARAMETERS = frozenset(
    {"ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert", "ssl_verify_identity", "ssl_disabled"}
)
_FLAGS = frozenset({"ssl_verify_cert", "ssl_verify_identity", "ssl_disabled"})
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")
#: a database name the library writes into nothing but the driver's connect
_DATABASE = re.compile(r"[A-Za-z0-9_$]{1,64}")


@dataclass(frozen=True)
class MySQLParams:
    """A parsed MySQL URL: the server, who we are, and the backend's settings."""

    host: str
    port: int
    database: str
    user: str | None
    password: str | None = field(repr=False)
    session_timeout: float
    connect_timeout: float
    request_timeout: float
    tls: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_url(cls, url: ServiceURL) -> MySQLParams:
        """ValueError naming what is wrong; no I/O."""
        unknown = sorted(set(url.params) - OUR_PARAMETERS - TLS_PARAMETERS)
        if unknown:
            raise ValueError(
                f"mysql URL parameter(s) {', '.join(unknown)} not understood; known: "
                f"{', '.join(sorted(OUR_PARAMETERS | TLS_PARAMETERS))}"
            )
        if "@" in url.path:  # (not echoed: the rest of the password is before it)
            raise ValueError(
                "the mysql URL has an '@' after its host: percent-encode '/', '?', "
                "'#' and '@' in the user and the password (%2F, %3F, %23, %40)"
            )
        userinfo, _, hostport = url.netloc.rpartition("@")
        user: str | None = None
        password: str | None = None
        if userinfo:
            name, sep, secret = userinfo.partition(":")
            user = unquote(name) or None
            password = unquote(secret) if sep else None
        user = user or url.params.get("user") or None
        if password is None:
            password = url.params.get("password")
        if "," in hostport:
            raise ValueError("a mysql URL names one server (mysql://host:3306/dbname)")
        host, port = _host_port(hostport)
        database = url.path.strip("/") or DEFAULT_DATABASE
        if not _DATABASE.fullmatch(database):
            raise ValueError(
                f"bad mysql database name {quoted(database)} (mysql://host:3306/dbname): "
                "1 to 64 characters from A-Z a-z 0-9 _ $"
            )
        tls: dict[str, Any] = {}
        for key in sorted(TLS_PARAMETERS & set(url.params)):
            value = url.params[key]
            tls[key] = _flag(key, value) if key in _FLAGS else value
        return cls(
            host=host,
            port=port,
            database=database,
            user=user,
            password=password,
            session_timeout=url.seconds_param(
                "session_timeout", DEFAULT_SESSION_TIMEOUT, minimum=MIN_SESSION_TIMEOUT
            ),
            connect_timeout=url.connect_timeout(),
            request_timeout=url.request_timeout(),
            tls=tls,
        )

    @property
    def orphan_grace(self) -> float:
        """How long the client's connection may be gone before its entries are dead."""
        return min(ORPHAN_GRACE, self.session_timeout / 3)

    def describe(self) -> str:
        """Where, for people: never the password."""
        who = f"{self.user}@" if self.user else ""
        tls = ", TLS" if self.tls and not self.tls.get("ssl_disabled") else ""
        return redact_url(f"mysql {who}{self.host}:{self.port}/{self.database}{tls}")


def _flag(key: str, value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"mysql URL parameter {key} is a flag (true or false), not {quoted(value)}")


def _host_port(text: str) -> tuple[str, int]:
    if not text:
        raise ValueError("a mysql URL names a host (mysql://host:3306/dbname)")
    host, sep, port_s = text.rpartition(":")
    if not sep or host.endswith(":") or ("[" in text and not host.endswith("]")):
        host, port_s = text, str(DEFAULT_PORT)
    if not _HOST.fullmatch(host):
        raise ValueError(f"bad mysql host {quoted(host)}")
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"bad mysql port {quoted(port_s)}") from None
    if not 0 < port < 65536:
        raise ValueError(f"mysql port {port} out of range")
    return host.strip("[]"), port
