"""Fenced writes in ZooKeeper: a ``multi`` that commits only while the permit's
entries exist (their session alive, the permit not released).

Connection loss: ``commit()`` raises BackendUnavailable after the request timeout (the
multi may still be applied: read back before committing again). Session expiry: the
fence fails and the commit raises PermitLost.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)

from .._core.deadline import Deadline
from ..backend import FencedTransaction, WriteKind
from ..errors import BackendUnavailable, PermitLost, WriteConflict
from ._waits import Within, ZkProgram

if TYPE_CHECKING:
    from .node import SemaphoreNode


class ZooKeeperFencedTransaction(FencedTransaction):
    """A kazoo multi that starts with a check that the permit's entry exists.

    The entry is ephemeral and its name unique, so the multi commits only while the
    permit's session is alive and the permit not released. Keys are paths inside the
    URL's chroot; a created key's parent must exist. ``commit()`` waits for the reply
    at most the request timeout, then raises BackendUnavailable: the multi may still be
    applied after that (kazoo sends it when the connection comes back, and the fence
    holds only while the session lives), so read back before committing again.
    """

    def __init__(self, queue: SemaphoreNode, entry_path: str, others: Sequence[str] = ()) -> None:
        """``others``: more entry paths that fence it (a multi-permit's)."""
        super().__init__(queue.backend)
        self._queue = queue
        self.entry_path = entry_path
        self._fences = [entry_path, *others]

    def apply(self) -> ZkProgram[None]:
        queue = self._queue
        yield Within(
            Deadline(queue.request_timeout, time.monotonic), self._no_answer, self.entry_path
        )
        tx = queue.client.transaction()
        for fence in self._fences:
            tx.check(fence, -1)  # version -1: any version, the node must exist
        for write in self.writes:
            if write.kind is WriteKind.CREATE:
                tx.create(write.key, write.value)
            elif write.kind is WriteKind.SET:
                tx.set_data(write.key, write.value, -1)
            else:
                tx.delete(write.key, -1)
        try:
            results = yield tx.commit_async()
        except SessionExpiredError as exc:
            raise PermitLost(f"session expired: {self.entry_path} is gone") from exc
        except ConnectionLoss as exc:
            raise BackendUnavailable(
                f"ZooKeeper unreachable: {exc!r}; the transaction may have been applied"
            ) from exc
        paths = [*self._fences, *(write.key for write in self.writes)]
        for path, result in zip(paths, results, strict=False):
            if isinstance(result, NoAuthError):
                raise queue.backend.permission_denied(path, result) from result
        for path, fence in zip(self._fences, results, strict=False):
            if isinstance(fence, Exception) and not isinstance(fence, RolledBackError):
                raise PermitLost(f"fence failed: {path} is gone") from fence
        for write, result in zip(self.writes, results[len(self._fences) :], strict=False):
            if isinstance(result, NodeExistsError):
                raise WriteConflict(write.key, "it exists") from result
            if isinstance(result, NoNodeError):
                raise WriteConflict(write.key, "it (or its parent) does not exist") from result
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise result

    def _no_answer(self) -> BackendUnavailable:
        return BackendUnavailable(
            f"no answer from ZooKeeper within the request timeout "
            f"({self._queue.request_timeout:g} s): the transaction may still be applied"
        )
