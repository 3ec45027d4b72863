"""Job slots in etcd: keys ``slots/<index>`` on the entry's lease.

A slot is taken by one txn that checks our entry still has its create_revision and the
slot's key does not exist; the record is deleted with its entry (``leaving.py``).
Connection loss: the txn is retried as is after UNAVAILABLE, and a record made by a lost
attempt is adopted. Lease expiry: the records go with the lease (SessionLost).
"""

from __future__ import annotations

import logging

from .._core.codec import encode_slot
from .._core.deadline import Deadline
from .._core.names import parse_etcd_entry
from .._core.program import Program
from .._core.protocol import SessionLost
from ..backend import Waiter
from .errors import EtcdLeaseNotFound
from .keyspace import SemaphoreKeys
from .ops import Compare, Op
from .rpc import Call

log = logging.getLogger("semaphore_recipes.etcd")


class SlotRecords(SemaphoreKeys):
    """List and take job slots."""

    def list_slots(self, waiter: Waiter, deadline: Deadline) -> Program[frozenset[int]]:
        reply = yield from self.call(
            lambda timeout: Call.txn([], [self.slots_range], [], timeout=timeout), deadline
        )
        return self.slot_indices(reply.responses[0].response_range.kvs)

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> Program[int | frozenset[int] | SessionLost]:
        """One txn: if our entry still has its create_revision and the slot's key does
        not exist, put it on the entry's lease (its token: the txn's revision, its one
        write); else read both. Retried as is after UNAVAILABLE: a lost attempt that
        made the record shows it naming our entry, and it is adopted."""
        uid, token = waiter.key, waiter.token
        assert uid is not None and token is not None
        key, slot_key = self.entry_key(uid), self.slot_key(index)
        ours = encode_slot(uid, token)
        lease = parse_etcd_entry(uid)[0]
        try:
            reply = yield from self.call(
                lambda timeout: Call.txn(
                    [
                        Compare.create_revision(key, "==", token),
                        Compare.create_revision(slot_key, "==", 0),
                    ],
                    [Op.put(slot_key, ours, lease=lease)],
                    [Op.range(key), self.slots_range],
                    timeout=timeout,
                ),
                deadline,
            )
        except EtcdLeaseNotFound:
            return SessionLost()  # the lease is gone, our entry with it
        if reply.succeeded:
            return int(reply.header.revision)
        entry = reply.responses[0].response_range.kvs
        if not entry or entry[0].create_revision != token:
            return SessionLost()  # our entry is gone: enter the queue again
        kvs = reply.responses[1].response_range.kvs
        mine = [kv for kv in kvs if kv.key == slot_key and kv.value == ours]
        if mine:  # made by an attempt whose reply was lost
            log.info("create reply of slot %d of %r was lost; adopted it", index, self.name)
            return int(mine[0].create_revision)
        return self.slot_indices(kvs)
