"""Revoking holders in etcd: a revoke request is ``"revoke": true`` in the holder's own
entry value, so the holder's watch of its key (``acquire(watch_entry=True)``, kept from
its create_revision) carries it with no request and no watch of its own.

The request is a read and a txn guarded by the entry's create_revision (its token: a
reused key is another entry) and the revision read (a concurrent write is read again);
the put keeps the holder's lease (``ignore_lease``) and every other field, so what the
protocol reads of the entry (held, lower, weight) is unchanged. A forced removal is a
delete guarded by the token, with the job slot records naming the entry, in one txn: as
the lease's end would. Connection loss: retried within the request timeout, then
BackendUnavailable (a request written before is harmless).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from .._core.codec import decode_entry, decode_slot
from .._core.program import Program
from .keyspace import SemaphoreKeys
from .ops import Compare, Op
from .rpc import Call

#: a revoke request that keeps meeting concurrent writes of the entry gives up after
#: this many reads (the holder's own held mark is the one write it can meet)
ATTEMPTS = 5


class Revocation(SemaphoreKeys):
    """``request_revoke`` and ``remove_revoked`` of the etcd queue."""

    def request_revoke(self, key: str, token: int) -> Program[bool]:
        entry = self.entry_key(key)
        for _ in range(ATTEMPTS):
            reply: Any = yield from self.call(lambda timeout: Call.range(entry, timeout=timeout))
            kvs = reply.kvs
            if not kvs or kvs[0].create_revision != token:
                return False
            data = decode_entry(key, kvs[0].value)
            if data.revoke:
                return True  # (a retry after a lost reply finds its own write)
            value = dataclasses.replace(data, revoke=True).encode()
            written: Any = yield from self.call(
                functools.partial(_guarded_put, entry, token, kvs[0].mod_revision, value)
            )
            if written.succeeded:
                return True
        return False

    def remove_revoked(self, key: str, token: int) -> Program[bool]:
        entry = self.entry_key(key)
        reply: Any = yield from self.call(
            lambda timeout: Call.txn([], [self.slots_range], [], timeout=timeout)
        )
        slots = [
            kv
            for kv in reply.responses[0].response_range.kvs
            if self.slot_index(kv.key) is not None
            and decode_slot(kv.key.decode(), kv.value) == (key, token)
        ]
        guard = [Compare.create_revision(entry, "==", token)]
        guard += [Compare.create_revision(kv.key, "==", kv.create_revision) for kv in slots]
        delete = [Op.delete(entry), *(Op.delete(kv.key) for kv in slots)]
        done: Any = yield from self.call(
            lambda timeout: Call.txn(guard, delete, [], timeout=timeout)
        )
        if done.succeeded or not slots:
            return bool(done.succeeded)
        # a slot record changed meanwhile: the entry alone (its holder's release or its
        # lease's end deletes what names it)
        alone: Any = yield from self.call(
            lambda timeout: Call.txn(guard[:1], delete[:1], [], timeout=timeout)
        )
        return bool(alone.succeeded)


def _guarded_put(entry: bytes, token: int, read_at: int, value: bytes, timeout: float) -> Call:
    """The write of a revoke request: only on the entry of ``token`` as read at
    ``read_at``, keeping its lease."""
    guard = [
        Compare.create_revision(entry, "==", token),
        Compare.mod_revision(entry, "==", read_at),
    ]
    return Call.txn(guard, [Op.put(entry, value, ignore_lease=True)], [], timeout=timeout)
