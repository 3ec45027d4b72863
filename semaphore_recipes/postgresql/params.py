"""What a ``postgresql://`` URL says, checked before any I/O.

``postgresql://user:password@host:port[,host2:port2]/dbname?schema=S&session_timeout=T``:
libpq's URI form. The library's parameters are ``schema`` (where its tables live),
``session_timeout``, ``connect_timeout`` and ``request_timeout``; libpq's TLS and
routing parameters (:data:`LIBPQ_PARAMETERS`) are passed to libpq as they are.
docs/operations.md lists them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from ..backend import ServiceURL, quoted, redact_url
from ..errors import InvalidName

__all__ = ["DEFAULT_PORT", "DEFAULT_SCHEMA", "PostgreSQLParams", "valid_schema"]

DEFAULT_PORT = 5432
DEFAULT_SCHEMA = "semaphore_recipes"
DEFAULT_SESSION_TIMEOUT = 10.0
#: a session renewed every third of its timeout must survive a scheduling hiccup
MIN_SESSION_TIMEOUT = 1.0
OUR_PARAMETERS = frozenset(
    {"schema", "session_timeout", "connect_timeout", "request_timeout", "user", "password"}
)
#: libpq connection parameters a URL may carry (given to libpq unchanged)
LIBPQ_PARAMETERS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcrl",
        "sslnegotiation",
        "application_name",
        "target_session_attrs",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    }
)
#: an unquoted PostgreSQL identifier (the schema's name is written into SQL text)
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")


@dataclass(frozen=True)
class PostgreSQLParams:
    """A parsed PostgreSQL URL: the servers, who we are, and the backend's settings."""

    hosts: tuple[tuple[str, int], ...]
    dbname: str
    user: str | None
    password: str | None = field(repr=False)
    schema: str
    session_timeout: float
    connect_timeout: float
    request_timeout: float
    libpq: dict[str, str] = field(default_factory=dict, repr=False)  # (sslpassword)

    @property
    def address(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.hosts)

    @classmethod
    def from_url(cls, url: ServiceURL) -> PostgreSQLParams:
        """ValueError (InvalidName for a bad schema) naming what is wrong; no I/O."""
        unknown = sorted(set(url.params) - OUR_PARAMETERS - LIBPQ_PARAMETERS)
        if unknown:
            raise ValueError(
                f"postgresql URL parameter(s) {', '.join(unknown)} not understood; known: "
                f"{', '.join(sorted(OUR_PARAMETERS | LIBPQ_PARAMETERS))}"
            )
        if "@" in url.path:  # (not echoed: the rest of the password is before it)
            raise ValueError(
                "the postgresql URL has an '@' after its host: percent-encode '/', '?', "
                "'#' and '@' in the user and the password (%2F, %3F, %23, %40)"
            )
        userinfo, _, hostports = url.netloc.rpartition("@")
        user: str | None = None
        password: str | None = None
        if userinfo:
            name, sep, secret = userinfo.partition(":")
            user = unquote(name) or None
            password = unquote(secret) if sep else None
        user = user or url.params.get("user") or None  # (libpq also takes them here)
        if password is None:
            password = url.params.get("password")
        hosts = tuple(_host_port(item) for item in hostports.split(","))
        dbname = url.path.strip("/")  # (none: libpq's default, the user's name)
        if "/" in dbname:
            raise ValueError(f"postgresql database name {quoted(dbname)} has a '/'")
        schema = valid_schema(url.params.get("schema", DEFAULT_SCHEMA))
        return cls(
            hosts=hosts,
            dbname=dbname,
            user=user,
            password=password,
            schema=schema,
            session_timeout=url.seconds_param(
                "session_timeout", DEFAULT_SESSION_TIMEOUT, minimum=MIN_SESSION_TIMEOUT
            ),
            connect_timeout=url.connect_timeout(),
            request_timeout=url.request_timeout(),
            libpq={k: v for k, v in url.params.items() if k in LIBPQ_PARAMETERS},
        )

    def conninfo(self) -> str:
        """libpq's connection string. libpq's ``connect_timeout`` is whole seconds (at
        least 2); the backend bounds the whole connect by its own clock as well."""
        pairs = {
            "host": ",".join(h for h, _ in self.hosts),
            "port": ",".join(str(p) for _, p in self.hosts),
            "dbname": self.dbname or None,
            "user": self.user,
            "password": self.password,
            "connect_timeout": str(max(2, math.ceil(self.connect_timeout))),
            **self.libpq,
        }
        return " ".join(f"{k}={_conninfo_value(v)}" for k, v in pairs.items() if v is not None)

    def describe(self) -> str:
        """Where, for people: never the password."""
        who = f"{self.user}@" if self.user else ""
        tls = f", sslmode={self.libpq['sslmode']}" if "sslmode" in self.libpq else ""
        return redact_url(
            f"postgresql {who}{self.address}/{self.dbname} (schema {self.schema}{tls})"
        )


def _conninfo_value(value: str) -> str:
    """A value in libpq's ``key=value`` form: quoted, ``\\`` and ``'`` escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def valid_schema(schema: str) -> str:
    """``schema`` if it is an unquoted identifier the library writes into its SQL."""
    if not _SCHEMA.fullmatch(schema):
        raise InvalidName(
            f"invalid postgresql schema {quoted(schema)}: 1 to 63 characters from "
            "a-z 0-9 _, not starting with a digit"
        )
    return schema


def _host_port(text: str) -> tuple[str, int]:
    if not text:
        raise ValueError("a postgresql URL names a host (postgresql://host:5432/dbname)")
    host, sep, port_s = text.rpartition(":")
    if not sep or host.endswith(":") or ("[" in text and not host.endswith("]")):
        host, port_s = text, str(DEFAULT_PORT)
    if not _HOST.fullmatch(host):
        raise ValueError(f"bad postgresql host {quoted(host)}")
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"bad postgresql port {quoted(port_s)}") from None
    if not 0 < port < 65536:
        raise ValueError(f"postgresql port {port} out of range")
    return host.strip("[]"), port
