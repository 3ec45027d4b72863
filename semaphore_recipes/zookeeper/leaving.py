"""Leaving the queue in ZooKeeper: remove, abandon, and deletes in the background.

An entry leaves with its slot records, in one ``multi`` when we can. A delete waits for
its reply at most the request timeout, then goes on in the background (kazoo's callback
thread), sent again after a ConnectionLoss until it lands or the session is gone.

A cancelled or interrupted acquire starts the delete of its entry (found by its id when
the create's reply has not come yet) and does not wait for it. Connection loss: kazoo
sends a pending delete on reconnect. Session expiry: the server removes the entries and
records with the session, and nothing is sent.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoNodeError,
    SessionExpiredError,
)

from .._core.codec import decode_slot
from .._core.deadline import Deadline
from ..backend import Waiter
from ._waits import Within, ZkProgram
from .slots import SlotRecords
from .steps import ProtocolSteps


class DeletePending(Exception):
    """No reply to a delete within the request timeout (it goes on in the background)."""


log = logging.getLogger("semaphore_recipes.zookeeper")


class Leaving(ProtocolSteps, SlotRecords):
    """Remove and abandon an entry (with its slot records); deletes in the background."""

    def remove(self, key: str, slot_records: Mapping[int, int | None]) -> ZkProgram[None]:
        yield self.delete_waits()
        alone = self.forget_entry(key)
        if (yield from self._deleting_entry(key, slot_records)):
            self.entry_gone(key)  # deleted, reply in hand
            if alone is not None:
                self.left_alone(alone)

    def _deleting_entry(self, key: str, slot_records: Mapping[int, int | None]) -> ZkProgram[bool]:
        """Delete our entry ``key`` and its ``slot_records`` in one ``multi`` (so no
        admitted newcomer ever sees a record whose entry is gone); :meth:`_deleting`'s
        bounds. A record already gone (deleted by hand) fails the multi: then the
        records go first, one by one, and the entry last."""
        path = f"{self.path}/{key}"
        slot_paths = yield from self.own_slot_paths(key, slot_records)
        if not slot_paths:
            return (yield from self._deleting(path))
        tx = self.client.transaction()
        for slot_path in slot_paths:
            tx.delete(slot_path)
        tx.delete(path)
        try:
            results = yield tx.commit_async()
            if not any(isinstance(r, Exception) for r in results):
                return True
        except BaseException as exc:
            # no answer in time, the connection lost, an interrupt: sent again in order,
            # records first (a multi applied meanwhile makes them no-ops)
            for slot_path in slot_paths:
                self._delete_slot_in_background(key, slot_path)
            self.delete_in_background(path)
            if not isinstance(exc, Exception):
                raise
            return False
        # our entry or a record was deleted by hand: each alone, the records first, each
        # only while it names our entry (another's may have taken a freed index)
        for slot_path in slot_paths:
            if (yield from self.names_entry(key, slot_path)):
                yield from self._deleting(slot_path)
        return (yield from self._deleting(path))

    def abandon(self, waiter: Waiter, slot_records: Mapping[int, int | None]) -> ZkProgram[None]:
        """Delete the waiter's entry, waiting for the replies at most the request timeout
        (then in the background): the exact entry, or, its create's reply not in hand,
        the one the listing finds by its id (sent after the create on the same session,
        it sees the create if it landed)."""
        yield self.delete_waits()
        if waiter.key is not None:
            self.forget_entry(waiter.key)
            yield from self._deleting_entry(waiter.key, slot_records)
            return
        entry_id = waiter.entry_id
        if entry_id is None or self.backend.failure is not None:
            return  # nothing was sent; or the server removes the entry with the session
        try:
            children = yield self.client.get_children_async(self.path)
        except NoNodeError:
            return
        except Exception:  # no answer in time, connection lost, client closed: never raises
            self._delete_by_id(entry_id)  # the background goes on from a fresh listing
            return
        for child in children:
            if child.startswith(f"e-{entry_id}-"):
                log.info("removing entry %s left by an interrupted acquire", child)
                yield from self._deleting(f"{self.path}/{child}")

    def delete_waits(self) -> Within:
        """A delete's bound, from now: the request timeout, then DeletePending (it goes
        on in the background)."""
        return Within(Deadline(self.request_timeout, time.monotonic), DeletePending, self.path)

    def _deleting(self, path: str) -> ZkProgram[bool]:
        """Delete exactly ``path`` (unique id + sequence: it can only be ours). Waits for
        the reply at most the request timeout; if the connection is down, kazoo sends it
        on reconnect and a ConnectionLoss sends it again until it lands or the session
        is gone. Never raises but an interrupt or a cancellation (the delete goes on).
        True when the reply says it is done."""
        if self.backend.failure is not None:
            log.warning("not deleting %s: %s", path, self.backend.failure)
            return False
        reply = self.client.delete_async(path)
        try:
            yield reply
            return True
        except DeletePending:
            log.warning("delete of %s is pending until ZooKeeper is reachable again", path)
        except KazooException:
            pass  # _deleted below sorts it out
        except Exception as exc:  # the client closed, or kazoo's own failure
            if not self.backend.closed:
                log.warning("delete of %s failed: %r", path, exc)
        except BaseException:
            reply.rawlink(self._deleted(path))  # interrupted: the delete is on its way
            raise
        # Only now: a callback costs a hop through kazoo's callback thread.
        reply.rawlink(self._deleted(path))
        return False

    def delete_in_background(self, path: str) -> None:
        """Send the delete of exactly ``path``; its reply is seen to on kazoo's thread."""
        if self.backend.failure is not None:
            log.warning("not deleting %s: %s", path, self.backend.failure)
            return
        self.client.delete_async(path).rawlink(self._deleted(path))

    def _delete_slot_in_background(self, key: str, slot_path: str) -> None:
        """Delete the slot record ``slot_path`` once a read shows it names our entry
        ``key`` (an index freed meanwhile may be another entry's), on kazoo's thread."""

        def read(result: Any) -> None:
            with contextlib.suppress(Exception):  # gone, or the session's end takes it
                raw, _ = result.get(block=False)
                if decode_slot(slot_path, raw)[0] == key:
                    self.delete_in_background(slot_path)

        if self.backend.failure is None:
            self.client.get_async(slot_path).rawlink(read)

    def _deleted(self, path: str) -> Callable[[Any], None]:
        """The reply of a delete of ``path``, on kazoo's callback thread: sent again
        after a ConnectionLoss, until it lands or the session is gone."""

        def done(result: Any) -> None:
            try:
                result.get(block=False)
            except ConnectionLoss:
                if not self.backend.closed:
                    self.client.delete_async(path).rawlink(done)
            except (NoNodeError, SessionExpiredError, ConnectionClosedError):
                pass
            except Exception as exc:
                log.error("could not delete %s: %r", path, exc)

        return done

    def _delete_by_id(self, entry_id: str) -> Any:
        """After an interrupted create: find the entry by its id and delete it, on kazoo's
        callback thread. The listing goes out on the same session after the create, so
        it sees the create if it landed. Returns the listing's reply (None: not sent)."""

        def listed(result: Any) -> None:
            try:
                children = result.get(block=False)
            except ConnectionLoss:
                if not self.backend.closed:
                    self.client.get_children_async(self.path).rawlink(listed)
                return
            except KazooException:
                return
            for child in children:
                if child.startswith(f"e-{entry_id}-"):
                    log.info("removing entry %s left by an interrupted acquire", child)
                    self.delete_in_background(f"{self.path}/{child}")

        if self.backend.failure is not None:
            return None  # the server removes the entry with the session
        reply = self.client.get_children_async(self.path)
        reply.rawlink(listed)
        return reply
