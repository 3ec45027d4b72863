"""Reading a semaphore's status in ZooKeeper: the capacity, the entries, their slots.

One listing and the capacity read go out back to back, then one read per child; a child
gone meanwhile is left out. Connection loss and expiry: the read waits at most the
backend's request timeout, then raises BackendUnavailable
(``backend.within_request_timeout``).
"""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from .._core.codec import (
    decode_capacity,
    decode_draining,
    decode_entry,
    decode_ramp,
    decode_slot,
)
from .._core.names import ZK_SLOT_PREFIX, parse_slot_index, parse_zk_entry
from .._core.ramp import RampPlan
from .._core.status import EntryStatus, Status, split_queue
from ..errors import SemaphoreNotFound
from ._waits import ZkProgram
from .node import SemaphoreNode

#: what a status read found: capacity, drain flag, (sequence, entry) rows, ramp plan,
#: the config's version (mzxid)
_Found = tuple[int, bool, list[tuple[int, EntryStatus]], RampPlan | None, int]


class StatusReading(SemaphoreNode):
    """The semaphore's status, read from the store."""

    def status(self) -> ZkProgram[Status]:
        reading = self.backend.within_request_timeout(
            self._reading_status, f"reading {self.path}", self.path
        )
        return self._status_of((yield from reading))

    def _reading_status(self) -> ZkProgram[_Found | None]:
        listing = self.client.get_children_async(self.path)
        capacity_reply = self.client.get_async(self.path)
        try:
            children = yield listing
            raw, config_stat = yield capacity_reply
        except NoNodeError:
            return None
        capacity = decode_capacity(self.name, raw)
        draining = decode_draining(self.name, raw)
        ramp = decode_ramp(self.name, raw)
        entries = []
        slot_reads = []
        for child in children:
            p = parse_zk_entry(child)
            if p is not None:
                entries.append((p, child, self.client.get_async(f"{self.path}/{child}")))
            index = parse_slot_index(child, ZK_SLOT_PREFIX)
            if index is not None:
                slot_reads.append((index, child, self.client.get_async(f"{self.path}/{child}")))
        slots: dict[str, list[int]] = {}  # entry -> its slots
        for index, child, reply in slot_reads:
            try:
                raw, _ = yield reply
            except NoNodeError:
                continue  # left while we listed
            slots.setdefault(decode_slot(child, raw)[0], []).append(index)
        rows = []
        for (_, weight, seq), child, reply in entries:
            try:
                raw, stat = yield reply
            except NoNodeError:
                continue  # left while we listed
            data = decode_entry(child, raw)
            held_slots = tuple(sorted(slots.get(child, ())))
            row = EntryStatus(
                child,
                data.owner,
                weight,
                stat.czxid,
                data.held,
                data.since,
                held_slots,
                data.revoke,
            )
            rows.append((seq, row))
        return capacity, draining, rows, ramp, int(config_stat.mzxid)

    def _status_of(self, found: _Found | None) -> Status:
        if found is None:  # deleted, or the store lost its data: not the capacity we knew
            where = f"ZooKeeper node {(self.client.chroot or '') + self.path}"
            raise SemaphoreNotFound(self.name, where)
        capacity, draining, rows, ramp, version = found
        rows.sort(key=lambda r: r[0])
        return split_queue(
            self.name,
            capacity,
            (r[1] for r in rows),
            draining=draining,
            ramp=ramp,
            config_version=version,
        )
