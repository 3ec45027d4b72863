"""etcd for tests: the launchers live in :mod:`semaphore_recipes.devtools.etcd_server`
(``dev-server`` and ``demo`` use them too) and are re-exported here."""

from ..devtools.etcd_server import (
    INSTALL_HINT,
    EtcdCluster,
    EtcdNotFound,
    EtcdServer,
    Metrics,
    etcd_version,
    find_etcd_binary,
)

__all__ = [
    "INSTALL_HINT",
    "EtcdCluster",
    "EtcdNotFound",
    "EtcdServer",
    "Metrics",
    "etcd_version",
    "find_etcd_binary",
]
