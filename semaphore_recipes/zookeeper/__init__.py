"""The ZooKeeper backend (kazoo).

Layout: ``<root>/<name>`` (persistent, ``{"capacity": N}``) holds one ephemeral
sequential node per queue entry, ``e-<uuid>-w<weight>-<seq>``. Entries are bound to the
backend's ZooKeeper session: a crashed client's entries vanish when its session expires.

Connection loss (SUSPENDED): waiters keep waiting (ZooKeeper re-arms their watches when
the same session reconnects); holders' permits are SUSPENDED, and LOST if the session
does not come back within its timeout. Session expiry (LOST): holders' permits are LOST
and ``permit.lost`` is set; waiters re-enter the queue with kazoo's new session.

``ZooKeeperBackend`` is imported on first use, so that importing a module of this
package (e.g. ``_kazoo_compat`` for the test tools) does not import the backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

__all__ = ["ZooKeeperBackend"]


def __getattr__(name: str) -> Any:
    if name == "ZooKeeperBackend":
        from .backend import ZooKeeperBackend

        return ZooKeeperBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
