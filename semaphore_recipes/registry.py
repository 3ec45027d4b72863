"""Which backend serves which URL scheme: one table, plus entry points.

:func:`semaphore_recipes.connect` finds a backend here by the URL's scheme
(development servers are not here: ``semaphore_recipes.devtools.launchers`` has its own
table, so that no runtime module imports the development tools). Built-in
backends are the lines of ``BUILTIN``; a third-party package adds one through the entry
point group ``semaphore_recipes.backends`` (name: the scheme; value:
``package.module:BackendClass``), or at run time with :func:`register`. Nothing is
imported until a scheme is used, so ``memory://`` needs none of the optional extras.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, cast

from ._core.shown import quoted_url
from ._url import ServiceURL
from ._url import parse_url as _parse_url
from .errors import BackendNotInstalled

if TYPE_CHECKING:
    from .backend import Backend

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendSpec",
    "backend_class",
    "parse_url",
    "register",
    "schemes",
    "spec",
    "spec_for_client",
]

ENTRY_POINT_GROUP = "semaphore_recipes.backends"


@dataclass(frozen=True)
class BackendSpec:
    """One backend: its scheme and where its parts are (``module:attribute``)."""

    scheme: str
    backend: str  #: the Backend subclass
    extra: str | None = None  #: the pip extra that installs its dependencies
    #: the port of a URL host that names none; None: the URL names no hosts
    default_port: int | None = None
    #: client objects ``connect()`` also takes (``module.Class``), e.g. a started KazooClient
    client_types: tuple[str, ...] = ()
    #: found through an entry point: its class says ``default_port`` (read when used)
    entry_point: bool = False


BUILTIN = (
    BackendSpec(
        "zookeeper",
        "semaphore_recipes.zookeeper.backend:ZooKeeperBackend",
        extra="zookeeper",
        default_port=2181,
        client_types=("kazoo.client.KazooClient",),
    ),
    BackendSpec(
        "etcd",
        "semaphore_recipes.etcd.backend:EtcdBackend",
        extra="etcd",
        default_port=2379,
    ),
    BackendSpec("memory", "semaphore_recipes.memory.backend:MemoryBackend"),
    # (no default_port: the URL's user:password@host:port is the backend's to parse)
    BackendSpec("redis", "semaphore_recipes.redis.backend:RedisBackend", extra="redis"),
    BackendSpec("rediss", "semaphore_recipes.redis.backend:TlsRedisBackend", extra="redis"),
    BackendSpec(
        "redis+sentinel", "semaphore_recipes.redis.backend:SentinelRedisBackend", extra="redis"
    ),
    BackendSpec(
        "rediss+sentinel",
        "semaphore_recipes.redis.backend:TlsSentinelRedisBackend",
        extra="redis",
    ),
    BackendSpec(
        "redis+cluster", "semaphore_recipes.redis.backend:RedisClusterBackend", extra="redis"
    ),
    BackendSpec(
        "rediss+cluster", "semaphore_recipes.redis.backend:TlsRedisClusterBackend", extra="redis"
    ),
    BackendSpec(
        "postgresql", "semaphore_recipes.postgresql.backend:PostgreSQLBackend", extra="postgresql"
    ),
    BackendSpec("mysql", "semaphore_recipes.mysql.backend:MySQLBackend", extra="mysql"),
)

_lock = threading.Lock()
_specs: dict[str, BackendSpec] = {s.scheme: s for s in BUILTIN}
_entry_points_read = False


def register(backend_spec: BackendSpec) -> None:
    """Add (or replace) the backend of a scheme for this process."""
    with _lock:
        _specs[backend_spec.scheme] = backend_spec


def _read_entry_points() -> None:
    global _entry_points_read
    with _lock:
        if _entry_points_read:
            return
        _entry_points_read = True
        for point in entry_points(group=ENTRY_POINT_GROUP):
            # not imported here: one broken plugin must not break every scheme
            _specs.setdefault(point.name, BackendSpec(point.name, point.value, entry_point=True))


def schemes() -> tuple[str, ...]:
    """Every scheme known: built in, registered, or from installed entry points."""
    _read_entry_points()
    with _lock:
        return tuple(_specs)


def spec(scheme: str) -> BackendSpec:
    """The backend of ``scheme``; ValueError naming the known schemes if none."""
    with _lock:
        found = _specs.get(scheme)
    if found is None:
        _read_entry_points()
        with _lock:
            found = _specs.get(scheme)
    if found is None:
        raise ValueError(
            f"unknown URL scheme {quoted_url(scheme)}: known are {', '.join(schemes())}"
        )
    return found


def _load(target: str, scheme: str, extra: str | None) -> Any:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise  # the module itself is missing: a wrong registry line, not an extra
        raise BackendNotInstalled(scheme, extra, exc.name or "?") from exc
    return getattr(module, attribute)


def parse_url(url: str) -> ServiceURL:
    """Parse ``url`` for its scheme's backend (no I/O; nothing imported but an
    entry-point backend's class): ValueError on an unknown scheme or a malformed URL."""
    if not isinstance(url, str):
        raise TypeError(f"URL must be a str, not {type(url).__name__}")
    scheme = url.partition("://")[0] if "://" in url else ""
    if not scheme:
        raise ValueError(f"URL {quoted_url(url)}: no scheme; known are {', '.join(schemes())}")
    found = spec(scheme)
    port = found.default_port
    if found.entry_point:
        port = getattr(_load(found.backend, scheme, found.extra), "default_port", None)
    return _parse_url(url, port)


def backend_class(scheme: str) -> type[Backend]:
    """The Backend subclass of ``scheme`` (imported now). BackendNotInstalled when its
    optional dependencies are missing."""
    found = spec(scheme)
    return cast("type[Backend]", _load(found.backend, scheme, found.extra))


def spec_for_client(client: object) -> BackendSpec | None:
    """The backend that takes ``client`` (an object of one of its ``client_types``)."""
    names = {f"{cls.__module__}.{cls.__qualname__}" for cls in type(client).__mro__}
    schemes()  # entry points too
    with _lock:
        specs = list(_specs.values())
    for candidate in specs:
        if names & set(candidate.client_types):
            return candidate
    return None
