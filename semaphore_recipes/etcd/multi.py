"""Several semaphores at once in etcd: one txn creates a request's entries, one txn
deletes them.

Every key a txn writes gets the txn's revision as its create_revision, and revisions
are global: two requests are ordered alike in every queue, and the entries share one
token. A txn whose reply was lost is retried as is: its compares fail if the lost
attempt created the keys (all or none), and the failure branch reads them back to adopt
them (as the single enqueue does with its one key).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._core.codec import EntryData
from .._core.deadline import Deadline
from .._core.program import Program
from .._core.protocol import Enqueued
from ..backend import QueueDriver, Waiter, nearest_needed, queues_of
from ..errors import PermissionDenied
from .errors import EtcdError, EtcdLeaseNotFound, EtcdUnavailable
from .keyspace import ATTEMPT_TIMEOUT, txn_within
from .leaving import NO_RECORDS
from .ops import Compare, Op
from .queue import EtcdQueue
from .rpc import Call
from .transaction import EtcdFencedTransaction

if TYPE_CHECKING:
    from .backend import EtcdBackend

log = logging.getLogger("semaphore_recipes.etcd")

Pairs = Sequence[tuple[QueueDriver, Waiter]]


def enqueuing_all(
    backend: EtcdBackend, pairs: Pairs, deadline: Deadline
) -> Program[dict[str, Enqueued]]:
    queues = queues_of(EtcdQueue, pairs)
    first = queues[0][0]
    for queue, waiter in queues:
        queue.drop_watchers(waiter)
    while True:
        for _, waiter in queues:
            waiter.new_generation()  # one per attempt, as the enqueue of steps.py
        lease = yield from backend.lease(deadline)
        uids = [backend.take_entry_slot(lease) for _ in queues]
        keys = [queue.entry_key(uid) for (queue, _), uid in zip(queues, uids, strict=True)]
        for (_, waiter), uid in zip(queues, uids, strict=True):
            waiter.creating(uid)
        compare = [Compare.create_revision(key, "==", 0) for key in keys]
        success: list[Any] = []
        for (_, waiter), key in zip(queues, keys, strict=True):
            value = EntryData(
                owner=waiter.owner, held=False, since=time.time(), weight=waiter.weight
            ).encode()
            success.append(Op.put(key, value, lease=lease))
        nearest = {queue.name: nearest_needed(queue.capacity) + 1 for queue, _ in queues}
        for queue, _ in queues:
            limit = nearest[queue.name]
            success.append(Op.range(queue.entries_prefix, queue.entries_end, limit=limit))
            success.append(Op.range(queue.config_key))
        failure = [Op.range(key) for key in keys]  # a lost attempt's keys, to adopt
        try:
            create = functools.partial(txn_within, compare, success, failure, uids[0])
            reply = yield from first.call(create, deadline)
        except EtcdLeaseNotFound:
            backend.lease_gone(lease)
            continue  # refused: nothing was created
        except PermissionDenied:
            for (_, waiter), uid in zip(queues, uids, strict=True):
                waiter.creating(None)
                backend.free_entry_slot(uid)
            raise
        n = len(queues)
        if reply.succeeded:
            token, entry_lease = int(reply.header.revision), lease
        else:
            found = [r.response_range.kvs for r in reply.responses[:n]]
            if not all(found):
                for uid in uids:
                    backend.free_entry_slot(uid)
                continue  # created on a lease that has since expired: gone already
            token, entry_lease = found[0][0].create_revision, found[0][0].lease
        if entry_lease != backend.lease_id:
            # the lease ended while the txn was on its way: delete them by their revision
            yield from _deleting(queues, uids, token)
            continue
        answers: dict[str, Enqueued] = {}
        for i, ((queue, waiter), uid) in enumerate(zip(queues, uids, strict=True)):
            if reply.succeeded:
                listed = reply.responses[n + 2 * i].response_range
                config = reply.responses[n + 2 * i + 1].response_range.kvs
                queue.apply_listed_capacity(config)
                if not listed.more:
                    answers[queue.name] = queue.enqueued(
                        waiter, uid, token, listed.kvs, complete=True, later=None
                    )
                    continue
            # a long queue, or adopted after a lost reply: the nearest entries below ours
            waiter.created(uid, token)  # an error or an interrupt below: it is undone
            below, complete = yield from queue.nearest_below(
                token, nearest[queue.name] - 1, deadline
            )
            answers[queue.name] = queue.enqueued(waiter, uid, token, below, complete, later=True)
        return answers


def one_by_one(pairs: Pairs) -> bool:
    """Are the entries to be deleted by each queue's own delete (a create reply not in
    hand, or tokens that differ)?"""
    tokens = {waiter.token for _, waiter in pairs}
    return any(waiter.key is None for _, waiter in pairs) or len(tokens) != 1


def deleting_all(backend: EtcdBackend, pairs: Pairs) -> Program[None]:
    """Every waiter's entry in one txn guarded by their token; an entry whose create
    reply is not in hand, or a guard that fails (an entry gone already), falls back to
    each queue's own delete."""
    queues = queues_of(EtcdQueue, pairs)
    if one_by_one(pairs):
        for queue, waiter in queues:
            yield from queue.abandon(waiter, NO_RECORDS)  # (an acquire_all takes no slots)
        return
    (token,) = {waiter.token for _, waiter in queues}
    assert token is not None
    uids = []
    for queue, waiter in queues:
        assert waiter.key is not None
        queue.leaving(waiter.key)
        uids.append(waiter.key)
    yield from _deleting(queues, uids, token)


def _deleting(queues: list[tuple[EtcdQueue, Waiter]], uids: list[str], token: int) -> Program[None]:
    keys = [queue.entry_key(uid) for (queue, _), uid in zip(queues, uids, strict=True)]
    guard = [Compare.create_revision(key, "==", token) for key in keys]
    timeout = min(ATTEMPT_TIMEOUT, queues[0][0].request_timeout)
    try:
        reply: Any = yield Call.txn(guard, [Op.delete(key) for key in keys], [], timeout=timeout)
    except (EtcdUnavailable, EtcdError) as exc:
        log.warning("delete of %s: %s; deleting them one by one", uids, exc)
        reply = None
    if reply is None or not reply.succeeded:
        for (queue, _), uid in zip(queues, uids, strict=True):
            yield from queue.delete_entry(uid, token)  # each guarded; frees its slot
        return
    for (queue, _), uid in zip(queues, uids, strict=True):
        queue.backend.free_entry_slot(uid)


def transaction_all(
    entries: Sequence[tuple[QueueDriver, str]], token: int
) -> EtcdFencedTransaction:
    queues = queues_of(EtcdQueue, entries)
    keys = [queue.entry_key(uid) for queue, uid in queues]
    first = queues[0][0]
    return EtcdFencedTransaction(first, keys[0], token, keys[1:])
