"""Fenced writes in etcd: a txn that commits only while the permit's entries still
have their create_revision (the fencing token).

Connection loss: ``commit()`` raises BackendUnavailable (the txn may still be applied:
read back before committing again). Lease expiry: the entries are gone, the fence fails
and the commit raises PermitLost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._core.program import Program
from ..backend import FencedTransaction, WriteKind
from ..errors import BackendUnavailable, PermitLost, WriteConflict
from .errors import EtcdAuthError, EtcdError, EtcdUnavailable
from .ops import Compare, Op
from .rpc import Call

if TYPE_CHECKING:
    from .keyspace import SemaphoreKeys


class EtcdFencedTransaction(FencedTransaction):
    """An etcd txn that commits only while the permit's entry still has its
    create_revision (the fencing token). The writes' conditions (created keys absent,
    set and deleted keys present) are compared beside the fence, in the one top-level
    txn (etcd 3.4 does not check permissions inside nested txns); when a compare fails,
    the failure branch reads the keys back to tell PermitLost from WriteConflict."""

    def __init__(
        self, queue: SemaphoreKeys, entry_key: bytes, token: int, others: Sequence[bytes] = ()
    ) -> None:
        """``others``: more entry keys of the same token that fence it (a multi-permit's)."""
        super().__init__(queue.backend)
        self._queue = queue
        self.entry_key = entry_key
        self.token = token
        self._fences = [entry_key, *others]

    def apply(self) -> Program[None]:
        """One attempt, bounded by the request timeout (a txn of yours is not retried:
        it need not be idempotent). BackendUnavailable when it fails or times out: the
        txn may still have been applied then, so read back before committing again.
        Cancelling the asyncio face's awaiting task does not un-send the txn either."""
        compare = [Compare.create_revision(fence, "==", self.token) for fence in self._fences]
        ops = []
        for write in self.writes:
            key = write.key.encode()
            absent = write.kind is WriteKind.CREATE
            compare.append(Compare.create_revision(key, "==" if absent else ">", 0))
            if write.kind is WriteKind.DELETE:
                ops.append(Op.delete(key))
            else:
                ops.append(Op.put(key, write.value))
        reads = [
            *(Op.range(f) for f in self._fences),
            *(Op.range(w.key.encode()) for w in self.writes),
        ]
        queue = self._queue
        timeout = queue.request_timeout
        try:
            reply: Any = yield Call.txn(compare, ops, reads, timeout=timeout)
        except EtcdUnavailable as exc:
            raise BackendUnavailable(
                f"etcd unreachable (request timeout {timeout:g} s): {exc}; the transaction "
                "may have been applied"
            ) from exc
        except EtcdAuthError as exc:
            keys = [self.entry_key.decode(errors="replace"), *(w.key for w in self.writes)]
            raise queue.backend.permission_denied("keys " + ", ".join(keys), exc) from exc
        except EtcdError as exc:
            raise BackendUnavailable(f"etcd refused the transaction: {exc}") from exc
        if reply.succeeded:
            return
        read = [r.response_range.kvs for r in reply.responses]
        fences, found = read[: len(self._fences)], read[len(self._fences) :]
        for fence, entry in zip(self._fences, fences, strict=True):
            if not entry or entry[0].create_revision != self.token:
                raise PermitLost(
                    f"fence failed: the permit's entry {fence.decode()} "
                    f"(token {self.token}) is gone"
                )
        for write, kvs in zip(self.writes, found, strict=True):
            if bool(kvs) == (write.kind is WriteKind.CREATE):
                raise WriteConflict(write.key, "it exists" if kvs else "it does not exist")
        raise WriteConflict(self.writes[0].key, "a condition failed")  # (changed meanwhile)
