"""Several semaphores at once in ZooKeeper: one ``multi`` creates a request's entries,
one ``multi`` deletes them.

ZooKeeper applies a multi as one transaction with one zxid, in the one order of all
writes: each queue's sequence numbers follow commit order, so two requests are ordered
alike in every queue, and every entry has the same czxid (the permit's token). The
entries share one entry id: a create whose reply was lost is looked for by it (all
entries or none exist). The listings go out right behind the multi on the same
session, so they see it if it landed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)

from .._core.codec import EntryData
from .._core.deadline import Deadline
from .._core.names import new_entry_id, zk_entry_prefix
from .._core.protocol import Enqueued
from ..backend import QueueDriver, Waiter, queues_of
from ._listing import sorted_entries
from ._waits import Await, ZkProgram
from .leaving import DeletePending
from .queue import ZooKeeperQueue
from .transaction import ZooKeeperFencedTransaction

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

log = logging.getLogger("semaphore_recipes.zookeeper")

Pairs = Sequence[tuple[QueueDriver, Waiter]]


def _connected(backend: ZooKeeperBackend) -> ZkProgram[None]:
    """Wait until the client is connected (at once when it is)."""
    if not backend.connected:
        yield Await.CONNECTION


def enqueue_all(
    backend: ZooKeeperBackend, pairs: Pairs, deadline: Deadline
) -> ZkProgram[dict[str, Enqueued]]:
    """The EnqueueAll step: one multi creates every entry, the listings go right behind
    it; bounded like each queue's enqueue (the acquire's deadline)."""
    queues = queues_of(ZooKeeperQueue, pairs)
    yield queues[0][0].step_waits(deadline)
    client = backend.client
    for _, waiter in queues:
        waiter.new_generation()
    while True:
        yield from _connected(backend)
        entry_id = new_entry_id()
        for _, waiter in queues:
            waiter.creating(entry_id)  # before the multi: an interrupted acquire finds them
        data = EntryData(owner=queues[0][1].owner, held=False, since=time.time()).encode()
        session = backend.session_id
        tx = client.transaction()
        for queue, waiter in queues:
            prefix = f"{queue.path}/{zk_entry_prefix(entry_id, waiter.weight)}"
            tx.create(prefix, data, ephemeral=True, sequence=True)
        commit = tx.commit_async()
        listings = [client.get_children_async(q.path, include_data=True) for q, _ in queues]
        try:
            results = yield commit
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                if any(isinstance(r, NoNodeError) for r in failed):
                    log.warning("a semaphore node of %s vanished; creating it again", entry_id)
                    for queue, _ in queues:
                        yield from queue.recreate_node()
                    continue
                raise next(r for r in failed if not isinstance(r, RolledBackError))
            paths: list[str] = list(results)
            stat = yield client.exists_async(paths[0])
            listed = []
            for listing in listings:
                listed.append((yield listing))
        except ConnectionLoss:
            found = yield from _find_after_lost_reply(backend, queues, entry_id)
            if found is None:
                continue
            paths, stat, listed = found
        except SessionExpiredError:
            continue  # the multi in the dead session died with it
        if stat is None:
            continue  # our entries are gone already: their session ended
        lost = False
        for (queue, _), (_, parent) in zip(queues, listed, strict=True):
            if not (yield from queue.capacity_checked(parent.mzxid)):
                lost = True
        if lost or backend.session_id != session:
            continue  # the session ended meanwhile: the entries are gone with it
        return {
            queue.name: queue.enqueued(waiter, path, stat.czxid, sorted_entries(children))
            for (queue, waiter), path, (children, _) in zip(queues, paths, listed, strict=True)
        }


def _find_after_lost_reply(
    backend: ZooKeeperBackend, queues: list[tuple[ZooKeeperQueue, Waiter]], entry_id: str
) -> ZkProgram[tuple[list[str], Any, list[Any]] | None]:
    """The multi's reply was lost: it applied all or nothing, so list every queue and
    find our entries by their id (None: it did not land)."""
    client = backend.client
    while True:
        yield from _connected(backend)
        try:
            listed = []
            for queue, _ in queues:
                listed.append((yield client.get_children_async(queue.path, include_data=True)))
            paths = []
            for (queue, _), (children, _) in zip(queues, listed, strict=True):
                mine = [c for c in children if c.startswith(f"e-{entry_id}-")]
                if not mine:
                    log.info("multi-create %s was lost before it reached ZooKeeper", entry_id)
                    return None
                paths.append(f"{queue.path}/{mine[0]}")
            stat = yield client.exists_async(paths[0])
            if stat is None:
                return None
            log.info("multi-create reply was lost; adopted entries %s", paths)
            return paths, stat, listed
        except ConnectionLoss:
            continue
        except (SessionExpiredError, NoNodeError):
            return None


def delete_all(backend: ZooKeeperBackend, pairs: Pairs) -> ZkProgram[None]:
    """One multi deleting every entry, waiting for its reply at most the request
    timeout (then in the background). Entries whose create reply is not in hand, or a
    multi that fails because one entry is gone already (its session ended, deleted by
    hand), fall back to each queue's own delete."""
    queues = queues_of(ZooKeeperQueue, pairs)
    if _leaving(backend, queues):
        yield queues[0][0].delete_waits()
        yield from _deleting_all(backend, queues)
    elif backend.failure is None:
        for queue, waiter in queues:
            # found by its id, one by one, each bounded by its own request timeout (an
            # acquire_all takes no job slots: no records go with them)
            yield from queue.abandon(waiter, {})


def _leaving(backend: ZooKeeperBackend, queues: list[tuple[ZooKeeperQueue, Waiter]]) -> bool:
    """Are the entries to be deleted in one multi (forgotten by their queues now)?
    Not when the backend failed (the server removes them with the session), nor when a
    create reply is not in hand (each queue finds its entry by its id)."""
    if backend.failure is not None or not queues:
        return False
    if any(waiter.key is None for _, waiter in queues):
        return False
    for queue, waiter in queues:
        assert waiter.key is not None
        queue.forget_entry(waiter.key)
    return True


def _deleting_all(
    backend: ZooKeeperBackend, queues: list[tuple[ZooKeeperQueue, Waiter]]
) -> ZkProgram[None]:
    paths = [f"{queue.path}/{waiter.key}" for queue, waiter in queues]
    tx = backend.client.transaction()
    for path in paths:
        tx.delete(path)
    reply = tx.commit_async()
    try:
        results = yield reply
    except DeletePending:
        log.warning("delete of %s is pending until ZooKeeper is reachable again", paths)
        reply.rawlink(lambda _: _one_by_one(queues, paths))
        return
    except (ConnectionLoss, KazooException):
        _one_by_one(queues, paths)
        return
    except BaseException:
        reply.rawlink(lambda _: _one_by_one(queues, paths))  # interrupted: goes on
        raise
    if any(isinstance(r, Exception) for r in results):
        _one_by_one(queues, paths)  # one is gone already: delete the others


def _one_by_one(queues: list[tuple[ZooKeeperQueue, Waiter]], paths: list[str]) -> None:
    for (queue, _), path in zip(queues, paths, strict=True):
        queue.delete_in_background(path)


def transaction_all(
    entries: Sequence[tuple[QueueDriver, str]], token: int
) -> ZooKeeperFencedTransaction:
    queues = queues_of(ZooKeeperQueue, entries)
    paths = [f"{queue.path}/{key}" for queue, key in queues]
    first = queues[0][0]
    # An entry's name is never reused: the existence of every entry is the fence.
    return ZooKeeperFencedTransaction(first, paths[0], paths[1:])
