"""Reading a semaphore's status in etcd: one txn reads the entries, the capacity and
the job slots at one revision. Connection loss: retried within the request timeout,
then BackendUnavailable.
"""

from __future__ import annotations

from .._core.codec import decode_capacity, decode_draining, decode_ramp, decode_slot
from .._core.program import Program
from .._core.status import EntryStatus, Status, split_queue
from ..errors import SemaphoreNotFound
from .keyspace import SemaphoreKeys
from .rpc import Call


class StatusReading(SemaphoreKeys):
    """The semaphore's status, read from the store."""

    def status(self) -> Program[Status]:
        reply = yield from self.call(
            lambda timeout: Call.txn(
                [], [*self.entries_and_config, self.slots_range], [], timeout=timeout
            )
        )
        config = reply.responses[1].response_range.kvs
        if not config:  # deleted, or the store lost its data: not the capacity we knew
            raise SemaphoreNotFound(self.name, f"etcd key {self.config_key.decode()}")
        capacity = decode_capacity(self.name, config[0].value)
        draining = decode_draining(self.name, config[0].value)
        slots: dict[tuple[str, int | None], list[int]] = {}  # (entry, its token) -> slots
        for kv in reply.responses[2].response_range.kvs:
            index = self.slot_index(kv.key)
            if index is not None:
                slots.setdefault(decode_slot(kv.key.decode(), kv.value), []).append(index)
        rows = []
        for kv in reply.responses[0].response_range.kvs:
            uid, weight, data = self.decode_listed(kv)
            held = tuple(sorted(slots.get((uid, kv.create_revision), ())))
            rows.append(
                (
                    kv.create_revision,
                    EntryStatus(
                        uid,
                        data.owner,
                        weight,
                        kv.create_revision,
                        data.held,
                        data.since,
                        held,
                        data.revoke,
                    ),
                )
            )
        rows.sort(key=lambda r: r[0])
        return split_queue(
            self.name,
            capacity,
            (r[1] for r in rows),
            draining=draining,
            ramp=decode_ramp(self.name, config[0].value),
            config_version=int(config[0].mod_revision),
        )
