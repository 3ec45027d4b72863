"""Telling that an etcd cluster's history went back behind this client.

Every etcd reply carries a header with the cluster's id and the revision of its store.
A cluster whose data was wiped (a new cluster at the same address) or restored from an
older snapshot answers with another cluster id or with a revision older than one this
client has already seen; its leases, keys and revisions (the fencing tokens) started
again. :class:`StoreHistory` keeps the first cluster id and the newest revision seen in
any reply, and :meth:`StoreHistory.went_back` tells whether a lease grant's reply (a
write, applied after every write whose revision the client saw) comes from an earlier
history. No I/O.
"""

from __future__ import annotations

import threading

__all__ = ["StoreHistory"]


class StoreHistory:
    """The cluster id and the newest revision this client has seen (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cluster_id = 0
        self.revision = 0

    def seen(self, reply: object) -> None:
        """Note the header of ``reply`` (a reply without one is ignored)."""
        header = getattr(reply, "header", None)
        if header is None:
            return
        with self._lock:
            if not self.cluster_id:
                self.cluster_id = int(header.cluster_id)
            self.revision = max(self.revision, int(header.revision))

    def went_back(self, reply: object, where: str) -> str | None:
        """Why the cluster that sent ``reply`` (a write's) has a history older than the
        one this client knew, in words; None when it has not."""
        header = getattr(reply, "header", None)
        if header is None:
            return None
        with self._lock:
            known, newest = self.cluster_id, self.revision
        cluster_id, revision = int(header.cluster_id), int(header.revision)
        if known and cluster_id and cluster_id != known:
            what = f"another cluster answers there (id {cluster_id:x}, not {known:x})"
        elif revision < newest:
            what = f"its revision is {revision}, older than the {newest} this client has seen"
        else:
            return None
        return (
            f"the etcd store's history restarted at {where}: {what} (its data was wiped, or "
            "restored from an older snapshot); every lease, entry and fencing token of "
            "before is gone (tokens start again: reset a fence that kept them, "
            "docs/operations.md); open a new backend"
        )
