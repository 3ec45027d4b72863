"""Job slots in ZooKeeper: ephemeral nodes ``+slot+<index>`` beside the entries.

A slot is taken by a multi that checks our entry exists and creates the record on the
same session, so a record lives no longer than its entry's session. The records an
entry holds are deleted with it (``leaving.py``); here is how they are listed, taken,
and found again.

Connection loss: a take whose reply was lost reads the record back and adopts it if it
names our entry. Session expiry: the records die with the session (SessionLost).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)

from .._core.codec import decode_slot, encode_slot
from .._core.deadline import Deadline
from .._core.names import ZK_SLOT_PREFIX, parse_slot_index, zk_slot_name
from .._core.protocol import SessionLost
from ..backend import Waiter
from ._waits import ZkProgram
from .node import SemaphoreNode

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

log = logging.getLogger("semaphore_recipes.zookeeper")


class SlotRecords(SemaphoreNode):
    """List and take slots; which records are an entry's."""

    def __init__(self, backend: ZooKeeperBackend, name: str) -> None:
        super().__init__(backend, name)
        # our entry -> the session its slot records were made on (they die with it)
        self._slot_sessions: dict[str, int | None] = {}

    def list_slots(
        self, waiter: Waiter, deadline: Deadline
    ) -> ZkProgram[frozenset[int] | SessionLost]:
        yield self.step_waits(deadline)
        return (yield from self._listing_slots())

    def _listing_slots(self) -> ZkProgram[frozenset[int] | SessionLost]:
        children = yield from self.children(NoNodeError)  # (no node: our entry went with it)
        if isinstance(children, SessionLost):
            return children
        indices = (parse_slot_index(child, ZK_SLOT_PREFIX) for child in children)
        return frozenset(index for index in indices if index is not None)

    def take_slot(
        self, waiter: Waiter, index: int, deadline: Deadline
    ) -> ZkProgram[int | frozenset[int] | SessionLost]:
        """A multi: check that our entry exists (so the record is made on its session,
        while it lives), create the ephemeral record; the read of the record's czxid
        (its token: a multi's reply has no stat) goes right behind it, one round trip."""
        yield self.step_waits(deadline)
        key = waiter.key
        assert key is not None
        entry_path = f"{self.path}/{key}"
        slot_path = f"{self.path}/{zk_slot_name(index)}"
        while True:
            yield from self.until_connected()
            tx = self.client.transaction()
            tx.check(entry_path, -1)  # version -1: any version, the node must exist
            tx.create(slot_path, encode_slot(key), ephemeral=True)
            with self._lock:  # made on this session or not at all (the check)
                self._slot_sessions[key] = self.backend.session_id
            multi = tx.commit_async()
            stat_reply = self.client.exists_async(slot_path)
            try:
                results = yield multi
                stat = yield stat_reply
            except ConnectionLoss:
                try:
                    found = yield from self._slot_after_lost_reply(key, slot_path)
                except SessionExpiredError:
                    return SessionLost()
                if found is None:
                    continue  # not created: again
                if found < 0:
                    return (yield from self._listing_slots())
                log.info("create reply of slot %d of %r was lost; adopted it", index, self.name)
                return found
            except SessionExpiredError:
                return SessionLost()
            check, create = results
            if isinstance(check, Exception) and not isinstance(check, RolledBackError):
                return SessionLost()  # our entry is gone: enter the queue again
            if isinstance(create, Exception):
                if isinstance(create, NoAuthError):
                    raise self.backend.permission_denied(slot_path, create) from create
                if not isinstance(create, NodeExistsError):
                    raise create
                return (yield from self._listing_slots())  # another entry holds it
            assert stat is not None  # read behind our create on the same session
            return int(stat.czxid)

    def _slot_after_lost_reply(self, key: str, slot_path: str) -> ZkProgram[int | None]:
        """After a lost multi reply: the record's czxid if it names our entry, -1 if
        it names another, None if there is none (the multi did not land)."""
        while True:
            yield from self.until_connected()
            try:
                raw, stat = yield self.client.get_async(slot_path)
            except NoNodeError:
                return None
            except ConnectionLoss:
                continue
            mine = decode_slot(slot_path, raw)[0] == key
            return int(stat.czxid) if mine else -1

    def records_leaving(
        self, key: str, slot_records: Mapping[int, int | None]
    ) -> Mapping[int, int | None]:
        """Of our entry ``key``'s ``slot_records`` (index -> token, None: reply not in
        hand), as it leaves: those still to delete, none when their session has ended
        (they went with it). The session they were made on is forgotten now."""
        with self._lock:
            session = self._slot_sessions.pop(key, None)
        if session != self.backend.session_id:
            return {}
        return slot_records

    def own_slot_paths(
        self, key: str, slot_records: Mapping[int, int | None]
    ) -> ZkProgram[list[str]]:
        """The paths of our entry ``key``'s ``slot_records``, which leaves now: those
        confirmed, and those whose create was interrupted before its reply and that name
        our entry (the read goes out after the create on the same session, so it sees it
        if it landed). None when their session has ended: they went with it, and an index
        may be another entry's by now."""
        records = self.records_leaving(key, slot_records)
        if not records or self.backend.failure:
            return []
        paths = []
        for index, token in sorted(records.items()):
            slot_path = f"{self.path}/{zk_slot_name(index)}"
            if token is not None or (yield from self.names_entry(key, slot_path)):
                paths.append(slot_path)
        return paths

    def names_entry(self, key: str, slot_path: str) -> ZkProgram[bool]:
        """Does the slot record ``slot_path`` exist and name our entry ``key``? (False
        when it cannot be read: never raises; the session's end removes it.)"""
        try:
            raw, _ = yield self.client.get_async(slot_path)
            return decode_slot(slot_path, raw)[0] == key
        except NoNodeError:
            return False
        except Exception as exc:
            log.warning("could not read slot record %s: %r", slot_path, exc)
            return False
