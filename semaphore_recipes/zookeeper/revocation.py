"""Revoking holders in ZooKeeper: a revoke request is ``"revoke": true`` in the holder's
own entry node's data, so the watch the holder keeps on its node
(``acquire(watch_entry=True)``) fires for it, with no request and no watch of its own.

The request is a read and a ``set_data`` over the version read (a concurrent write, the
holder's own held mark, is read again), only on the node created with the token asked
(its czxid); every other field is kept, so what the protocol reads of the entry (held,
lower) is unchanged. Its successors' one-shot watches fire as for a held mark: they
take the entry for marked (only which entries they watch depends on it, never an
admission) and read it again (docs/design.md, "Revocation"). A forced removal deletes
the node and the job slot records naming it in one ``multi`` that checks the node's
version, as the session's end would. Connection loss: made again within the request
timeout, then BackendUnavailable (a request written before is harmless).
"""

from __future__ import annotations

import dataclasses

from kazoo.exceptions import BadVersionError, NoNodeError

from .._core.codec import decode_entry
from .._core.names import ZK_SLOT_PREFIX, parse_slot_index
from ._waits import ZkProgram
from .slots import SlotRecords

#: a request or removal that keeps meeting concurrent writes gives up after this many
#: reads (the holder's own held mark is the one write it can meet)
ATTEMPTS = 5


class Revocation(SlotRecords):
    """``request_revoke`` and ``remove_revoked`` of the ZooKeeper queue."""

    def request_revoke(self, key: str, token: int) -> ZkProgram[bool]:
        path = f"{self.path}/{key}"
        return (
            yield from self.backend.within_request_timeout(
                lambda: self._asking(path, key, token), f"revoking {path}", path
            )
        )

    def _asking(self, path: str, key: str, token: int) -> ZkProgram[bool]:
        for _ in range(ATTEMPTS):
            try:
                raw, stat = yield self.client.get_async(path)
            except NoNodeError:
                return False
            if stat.czxid != token:
                return False
            data = decode_entry(key, raw)
            if data.revoke:
                return True  # (a retry after a lost reply finds its own write)
            value = dataclasses.replace(data, revoke=True).encode()
            try:
                yield self.client.set_async(path, value, version=stat.version)
            except BadVersionError:
                continue  # written meanwhile: read again
            except NoNodeError:
                return False
            return True
        return False

    def remove_revoked(self, key: str, token: int) -> ZkProgram[bool]:
        path = f"{self.path}/{key}"
        return (
            yield from self.backend.within_request_timeout(
                lambda: self._removing(path, key, token), f"removing {path}", path
            )
        )

    def _removing(self, path: str, key: str, token: int) -> ZkProgram[bool]:
        for _ in range(ATTEMPTS):
            try:
                _, stat = yield self.client.get_async(path)
            except NoNodeError:
                return False
            if stat.czxid != token:
                return False
            children = yield self.client.get_children_async(self.path)
            records = []
            for child in children:
                slot_path = f"{self.path}/{child}"
                if parse_slot_index(child, ZK_SLOT_PREFIX) is not None and (
                    yield from self.names_entry(key, slot_path)
                ):
                    records.append(slot_path)
            tx = self.client.transaction()
            tx.check(path, stat.version)
            for slot_path in records:
                tx.delete(slot_path)
            tx.delete(path)
            results = yield tx.commit_async()
            if not any(isinstance(r, Exception) for r in results):
                return True
            # the node or a record changed meanwhile: read again
        return False
