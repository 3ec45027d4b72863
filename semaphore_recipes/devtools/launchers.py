"""Which store has a development server, and the function that starts it: one table.

``semaphore-recipes dev-server`` and ``demo`` find a launcher here by URL scheme. The
table lives in this package, not in the backend registry, so that no runtime module
imports the development tools. Adding a store's dev server: a ``<store>_server`` module
beside this one with ``start_dev_server(port) -> DevServer``, and its line here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from . import etcd_server, zookeeper_server
from .dev_server import DevServer

__all__ = ["LAUNCHERS", "dev_server_launcher", "dev_server_schemes"]

#: scheme -> ``start_dev_server(port)``: ``port`` None for any free one
LAUNCHERS: Mapping[str, Callable[[int | None], DevServer]] = {
    "zookeeper": zookeeper_server.start_dev_server,
    "etcd": etcd_server.start_dev_server,
}


def dev_server_schemes() -> tuple[str, ...]:
    """The schemes that have a development server."""
    return tuple(LAUNCHERS)


def dev_server_launcher(scheme: str) -> Callable[[int | None], DevServer]:
    """``start_dev_server(port)`` of ``scheme``; ValueError, naming the schemes that
    have one, for any other."""
    try:
        return LAUNCHERS[scheme]
    except KeyError:
        known = ", ".join(sorted(LAUNCHERS))
        raise ValueError(f"no dev server for {scheme!r} (known: {known})") from None
