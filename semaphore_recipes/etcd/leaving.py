"""Leaving the queue in etcd: remove, abandon, and deletes retried in the background.

An entry leaves with its job slot records, in one txn guarded by their create_revisions;
what we kept about it (its token, a held mark not sent yet, its holder's watch) is
forgotten first. A delete is tried now, bounded by the request timeout; if etcd cannot
be reached it is retried in the background until the queue closes (the lease's end
removes the entry anyway). A cancelled asyncio acquire deletes its entry in the
background, after its create's outcome if the create was still on its way. ``remove``
and ``abandon`` are programs (:mod:`.runner`): the sync face runs them blocking, the
asyncio face awaited, where a cancel of the awaiting task leaves the delete going on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .._core.codec import encode_slot
from .._core.deadline import Deadline
from .._core.program import Program
from ..backend import Waiter
from ._proto import etcd_api_pb2 as pb
from .entry_txns import entry_delete
from .errors import EtcdError, EtcdUnavailable
from .keyspace import ATTEMPT_TIMEOUT, SemaphoreKeys
from .ops import Compare, Op
from .retry import retrying
from .rpc import Call, Rpc, UndoCreate
from .watch import Watcher

if TYPE_CHECKING:
    from .backend import EtcdBackend

log = logging.getLogger("semaphore_recipes.etcd")

#: An entry's slot records when it has none (one that never took a slot)
NO_RECORDS: Mapping[int, int | None] = MappingProxyType({})


class Leaving(SemaphoreKeys):
    """Remove and abandon our entries (with their slot records); retried deletes."""

    def __init__(self, backend: EtcdBackend, name: str) -> None:
        super().__init__(backend, name)
        self._tokens: dict[str, int] = {}  # our entries' create_revisions
        self._holder_watchers: dict[str, Watcher] = {}  # acquire(watch_entry=True)
        self._marks_pending: set[tuple[str, int]] = set()  # marks handed to the background
        # our held entries whose holder is told of a revoke request: key -> (token, tell)
        self._revocation_watches: dict[str, tuple[int, Callable[[], None]]] = {}
        self._revoked: set[tuple[str, int]] = set()  # requests seen (kept by a late mark)

    # ---- what an entry's leaving undoes ------------------------------------------
    def entry_created(self, uid: str, token: int) -> None:
        """Our entry ``uid`` has the token (create_revision) ``token``, until it leaves."""
        with self._lock:
            self._tokens[uid] = token

    def mark_pending(self, key: str, token: int) -> None:
        """The held mark of our entry ``key`` (of ``token``) is handed to the background."""
        with self._lock:
            self._marks_pending.add((key, token))

    def mark_still_pending(self, key: str, token: int) -> bool:
        """Is that mark still to be sent (taken now)? False once its entry left."""
        with self._lock:
            if (key, token) not in self._marks_pending:
                return False
            self._marks_pending.discard((key, token))
            return True

    def holder_watching(self, key: str, watcher: Watcher) -> None:
        """The watch of our held entry ``key`` (``acquire(watch_entry=True)``)."""
        with self._lock:
            self._holder_watchers[key] = watcher

    def watch_revocation(self, key: str, token: int, on_revoke: Callable[[], None]) -> None:
        """Told by the holder's entry watch (``watch_entry``), which sees every write
        of the entry from its creation: a request written before this call too."""
        with self._lock:
            self._revocation_watches[key] = (token, on_revoke)

    def revoke_seen(self, key: str, token: int) -> None:
        """The holder's watch saw a revoke request on our entry ``key`` of ``token``."""
        with self._lock:
            watch = self._revocation_watches.get(key)
            if watch is None or watch[0] != token:
                return
            del self._revocation_watches[key]
            self._revoked.add((key, token))
        watch[1]()

    def revoked(self, key: str, token: int) -> bool:
        """Was a revoke request seen on our entry (a held mark written later keeps it)?"""
        with self._lock:
            return (key, token) in self._revoked

    def drop_holder_watchers(self) -> list[Watcher]:
        """The holders' watches, forgotten (the queue closes): to cancel."""
        with self._lock:
            watchers = list(self._holder_watchers.values())
            self._holder_watchers.clear()
        return watchers

    # ---- leaving ------------------------------------------------------------------
    def remove(self, key: str, slot_records: Mapping[int, int | None]) -> Program[None]:
        # Its first attempt is bounded by the request timeout, then it goes on in the
        # background (delete_entry). Cancelling the asyncio face's task cancels the call,
        # which may or may not have been applied: the delete (guarded, so repeating it is
        # harmless) is sent again in the background, with the same slot records. (The
        # sync face holds an interrupt until the call returns: the delete was sent.)
        token = self.leaving(key)
        try:
            yield from self.delete_entry(key, token, slot_records)
        except asyncio.CancelledError:
            self.backend.spawn(self.delete_entry(key, token, slot_records))
            raise

    def leaving(self, key: str) -> int | None:
        """Our entry ``key`` leaves: forget its token and a mark not sent yet, end its
        holder's watch (first: our own delete is no loss to report). Its token, if
        known."""
        with self._lock:
            token = self._tokens.pop(key, None)
            self._marks_pending.discard((key, token))
            self._revoked.discard((key, token))
            self._revocation_watches.pop(key, None)
            watcher = self._holder_watchers.pop(key, None)
        if watcher is not None:
            self.cancel_watchers([watcher])
        return token

    def abandon(self, waiter: Waiter, slot_records: Mapping[int, int | None]) -> Program[None]:
        if self.backend.closed:
            return  # the close revokes the lease: every entry goes with it
        if waiter.key is not None:
            yield from self.remove(waiter.key, slot_records)
        elif waiter.entry_id is not None:
            # Its slot is not reused before this delete lands: only ever our entry. The
            # create, if it was sent, may still be on its way (a cancelled asyncio
            # acquire's): the undo waits for its outcome, within the request timeout,
            # then goes on in the background.
            undo = self.delete_entry(waiter.entry_id, None, slot_records)
            yield UndoCreate(waiter.entry_id, undo, self.request_timeout)

    def delete_entry(
        self, uid: str, token: int | None, slot_records: Mapping[int, int | None] = NO_RECORDS
    ) -> Program[None]:
        """Delete our entry, guarded by its create_revision when known, and its job slot
        records ``slot_records`` (index -> token, None when maybe made) in the same txn
        (each guarded by its own create_revision). Tries now; if etcd cannot be reached,
        retries in the background (the lease's end removes the entry anyway)."""
        key = self.entry_key(uid)
        slots = {self.slot_key(i): t for i, t in slot_records.items() if t is not None}
        timeout = min(ATTEMPT_TIMEOUT, self.request_timeout)
        if slots:
            guard = [] if token is None else [Compare.create_revision(key, "==", token)]
            guard += [Compare.create_revision(k, "==", t) for k, t in slots.items()]
            request = pb.TxnRequest(
                compare=guard, success=[Op.delete(key), *(Op.delete(k) for k in slots)]
            )
        else:  # (every release of a semaphore without job slots: built the short way)
            request = entry_delete(key, token)
        try:
            # release() returns within the request timeout, the background goes on after
            reply: Any = yield Call(Rpc.TXN, request, timeout)
        except EtcdUnavailable:
            log.warning("delete of %r is pending until etcd is reachable again", uid)
            self.backend.spawn(self._delete_retried(uid, request))
            return
        except EtcdError as exc:
            log.warning("delete of %r failed: %s", uid, exc)
            return
        if slots and not reply.succeeded:
            # the entry or a record was gone already (its lease, or by hand): each alone,
            # the records first
            for slot_key, slot_token in slots.items():
                yield from self._delete_guarded(
                    [Compare.create_revision(slot_key, "==", slot_token)], slot_key
                )
            if token is not None:
                yield from self._delete_guarded([Compare.create_revision(key, "==", token)], key)
        maybe_made = [i for i, t in slot_records.items() if t is None]
        if token is not None and maybe_made:
            # A record whose create was interrupted before its reply, if it names this
            # entry: after the entry's delete, which no later create of it can pass
            # (its txn compares the entry), so none appears after this.
            ours = encode_slot(uid, token)
            for index in maybe_made:
                slot_key = self.slot_key(index)
                yield from self._delete_guarded([Compare.value(slot_key, "==", ours)], slot_key)
        # Deleted, or already gone (the guard failed): the slot can serve again.
        self.backend.free_entry_slot(uid)

    def _delete_guarded(self, guard: list[Any], key: bytes) -> Program[None]:
        """One guarded delete of ``key``, now or (unreachable) in the background."""
        request = pb.TxnRequest(compare=guard, success=[Op.delete(key)])
        try:
            yield Call(Rpc.TXN, request, min(ATTEMPT_TIMEOUT, self.request_timeout))
        except EtcdUnavailable:
            self.backend.spawn(self._delete_retried(None, request))
        except EtcdError as exc:
            log.warning("delete of %r failed: %s", key, exc)

    def _delete_retried(self, uid: str | None, request: pb.TxnRequest) -> Program[None]:
        if self.closed:
            return
        # gives up when the queue closes (or etcd refuses it): the lease's end removes
        # the entry then
        with contextlib.suppress(EtcdError):
            yield from retrying(
                lambda timeout: Call(Rpc.TXN, request, timeout),
                Deadline(None, time.monotonic),
                attempt_timeout=ATTEMPT_TIMEOUT,
                initial_backoff=0.2,
                max_backoff=0.2,
                stop=lambda: self.closed,
            )
            if uid is not None:
                self.backend.free_entry_slot(uid)
