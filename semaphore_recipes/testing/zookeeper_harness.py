"""The ZooKeeper harness: fault verbs on a single server or a 3-member ensemble."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backend import Backend
from ..client import Client
from ..zookeeper.backend import ZooKeeperBackend
from .faces import store_backend
from .harness import NetworkHarness, Verb
from .plugin import leftover_entries
from .zookeeper_server import expire_session

if TYPE_CHECKING:
    from .zookeeper_server import ZooKeeperEnsemble

__all__ = ["ZooKeeperHarness"]


class ZooKeeperHarness(NetworkHarness):
    """ZooKeeper behind ``url`` (a chroot of the test's own).

    ``expire_session``: a second client attaches to the backend's session (id and
    password) and closes it: the server expires it for real, and the call returns once
    the backend's client reported it LOST. ``kill_leader`` with an ``ensemble`` only.
    ``admin`` is a started kazoo client without chroot, for listing entries.
    """

    kind = "zookeeper"

    def __init__(
        self,
        url: str,
        make: Callable[..., Client],
        *,
        servers: list[str],
        namespace: str,
        admin: Any,
        ensemble: ZooKeeperEnsemble | None = None,
    ) -> None:
        super().__init__(url, make, servers)
        self._namespace = namespace
        self._admin = admin
        self._ensemble = ensemble
        missing = {
            Verb.LIST_SESSIONS: "a ZooKeeper session ends with its expiry on the server; "
            "there is no leaked session to look for",
        }
        if ensemble is None:
            missing[Verb.KILL_LEADER] = "a single server (zookeeper_cluster_harness has one)"
        self.missing = missing

    def connect(self, *args: Any, **kwargs: Any) -> Client:
        """As :meth:`Harness.connect`, typed for this store."""
        backend = super().connect(*args, **kwargs)
        if not isinstance(store_backend(backend), ZooKeeperBackend):
            raise TypeError(f"the ZooKeeper harness opened {backend!r}")
        return backend

    def entries(self, name: str | None = None) -> list[str]:
        # retried: an ensemble's admin client may be reconnecting after a leader kill
        found: list[str] = self._admin.retry(leftover_entries, self._admin, self._namespace, name)
        return found

    def delete_entry(self, entry: str) -> None:
        self._admin.retry(self._admin.delete, entry)

    def expire_session(self, backend: Client | Backend) -> None:
        backend = store_backend(backend)
        if not isinstance(backend, ZooKeeperBackend):
            raise TypeError(f"not a ZooKeeper backend: {backend!r}")
        expire_session(backend.client, hosts=",".join(self._servers))

    def kill_leader(self) -> None:
        if self._ensemble is None:
            raise self._lacks(Verb.KILL_LEADER)
        self._ensemble.leader().kill()
