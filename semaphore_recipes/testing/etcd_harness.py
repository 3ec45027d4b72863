"""The etcd harness: fault verbs on a single member or a 3-member cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..backend import Backend
from ..client import Client
from ..etcd.backend import EtcdBackend
from .faces import store_backend
from .harness import NetworkHarness, Verb
from .plugin import alive_etcd_leases, leftover_etcd_entries

if TYPE_CHECKING:
    from ..etcd.client import EtcdClient
    from .etcd_server import EtcdCluster

__all__ = ["EtcdHarness"]


class EtcdHarness(NetworkHarness):
    """etcd behind ``url`` (a key prefix of the test's own).

    ``expire_session`` revokes the backend's lease (its keys go at once; the backend
    learns of it from its keepalive or watches). ``sessions`` lists the leases etcd holds.
    ``admin`` is an ``EtcdClient`` of the single member; with a ``cluster`` (and no
    admin) each call opens one to the members running then, which may have lost one.
    """

    kind = "etcd"

    def __init__(
        self,
        url: str,
        make: Callable[..., Client],
        *,
        servers: list[str],
        namespace: str,
        admin: EtcdClient | None = None,
        cluster: EtcdCluster | None = None,
    ) -> None:
        super().__init__(url, make, servers)
        if (admin is None) == (cluster is None):
            raise ValueError("give the admin client of a single member, or a cluster")
        self._namespace = namespace
        self._admin = admin
        self._cluster = cluster
        self.missing = (
            {Verb.KILL_LEADER: "a single member (etcd_cluster_harness has one)"}
            if cluster is None
            else {}
        )

    def connect(self, *args: Any, **kwargs: Any) -> Client:
        """As :meth:`Harness.connect`, typed for this store."""
        backend = super().connect(*args, **kwargs)
        if not isinstance(store_backend(backend), EtcdBackend):
            raise TypeError(f"the etcd harness opened {backend!r}")
        return backend

    @contextmanager
    def _admin_client(self) -> Iterator[EtcdClient]:
        if self._admin is not None:
            yield self._admin
            return
        from ..etcd.client import EtcdClient

        assert self._cluster is not None
        with EtcdClient([m.endpoint for m in self._cluster.members if m.running]) as admin:
            yield admin

    def entries(self, name: str | None = None) -> list[str]:
        with self._admin_client() as admin:
            return leftover_etcd_entries(admin, self._namespace, name)

    def delete_entry(self, entry: str) -> None:
        with self._admin_client() as admin:
            admin.delete_range(entry)

    def expire_session(self, backend: Client | Backend) -> None:
        with self._admin_client() as admin:
            admin.lease_revoke(self.session_of(backend))

    def sessions(self) -> set[int]:
        with self._admin_client() as admin:
            return alive_etcd_leases(admin)

    def session_of(self, backend: Client | Backend) -> int:
        backend = store_backend(backend)
        if not isinstance(backend, EtcdBackend):
            raise TypeError(f"not an etcd backend: {backend!r}")
        lease: int = backend.lease_id
        return lease

    def kill_leader(self) -> None:
        if self._cluster is None:
            raise self._lacks(Verb.KILL_LEADER)
        self._cluster.leader().kill()
