"""Several semaphores at once on Redis: one script creates a request's entries, one
script removes them.

A script runs alone on the primary, so ``ENQUEUE_ALL`` takes one number from the
counter for every entry of the request (the store-wide counter; on Redis Cluster the
semaphores' hash tag's, since a script reads one slot: :mod:`.layout` refuses
semaphores of different tags before any I/O): it is each entry's order (its score in
each queue) and the permit's one fencing token. Two requests are therefore ordered
alike in every queue, by that number. The entries share one client-generated id: a
retry after a lost reply finds them (all or none were made). Admission is each queue's
sweep, as for one entry; ``REMOVE_ALL`` deletes them all and sweeps every queue (the
newly admitted waiters are told, as one release tells them); ``FENCE_ALL`` checks every
entry, its token and its lease before writing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._core.protocol import Enqueued
from ..backend import Deadline, Program, QueueDriver, Waiter, queues_of
from ..errors import Draining
from .calls import Arg
from .queue import EntryView, RedisQueue, lease_lost, refuse_abandoned
from .scripts import ScriptName
from .transaction import RedisFencedTransaction

if TYPE_CHECKING:
    from .backend import RedisBackend

log = logging.getLogger("semaphore_recipes.redis")

Pairs = Sequence[tuple[QueueDriver, Waiter]]


def _where(backend: RedisBackend, queues: list[tuple[RedisQueue, Waiter]]) -> str:
    return f"semaphores {sorted(q.name for q, _ in queues)} on {backend.describe()}"


def enqueue_all(
    backend: RedisBackend, pairs: Pairs, deadline: Deadline
) -> Program[dict[str, Enqueued]]:
    """The EnqueueAll step (a program, run by either face)."""
    backend.check_open()  # (before an entry id is chosen: nothing to abandon)
    queues = queues_of(RedisQueue, pairs)
    for queue, waiter in queues:
        queue.drop_route(waiter.entry_id)
    prefix = backend.layout.of_all(queue.name for queue, _ in queues)  # (before any I/O)
    replicas = backend.params.wait_replicas
    while True:
        yield from backend.leasing(prefix, deadline)
        lease = backend.lease
        entry_id = f"{lease}.m{backend.new_id()}"  # (lease first: a lost lease names it)
        args: list[Arg] = [prefix, "", entry_id, lease, queues[0][1].owner]
        for queue, waiter in queues:
            queue.creating(waiter, entry_id)
            capacity, _ = queue.capacity_answer()
            args += [queue.name, waiter.weight, capacity]
        reply = yield from backend.script(
            ScriptName.ENQUEUE_ALL,
            tuple(args),
            _where(backend, queues),
            deadline=deadline,
            replicas=replicas,
        )
        acknowledged = replicas
        if replicas:
            reply, acknowledged = reply
        refuse_abandoned(reply, entry_id, _where(backend, queues))
        if isinstance(reply, list) and reply[:1] == [b"draining"]:  # (no entry was made)
            raise Draining(reply[1].decode())
        if lease_lost(reply) or reply == [b"partial"]:
            for queue, _ in queues:
                queue.drop_route(entry_id)
            if lease_lost(reply):  # our lease expired: the keeper makes a new one
                yield from backend.await_new_lease(lease, deadline)
            else:
                log.warning("entries %s were removed after a lost reply; again", entry_id)
            continue
        views = [EntryView.parse(raw) for raw in reply]
        for (_, waiter), view in zip(queues, views, strict=True):
            waiter.created(entry_id, view.order)
            backend.history.note_counter(prefix, view.order)  # the order is the counter's
        if acknowledged < replicas and any(view.held for view in views):
            raise queues[0][0].unreplicated(acknowledged)  # the face's cleanup removes them
        return {
            queue.name: queue.enqueued(waiter, entry_id, view)
            for (queue, waiter), view in zip(queues, views, strict=True)
        }


def removing_all(backend: RedisBackend, entries: Sequence[tuple[RedisQueue, str]]) -> Program[Any]:
    """Remove our ``(queue, entry id)`` entries in one script, each queue swept (its
    newly admitted waiters told)."""
    prefix = backend.layout.of_all(queue.name for queue, _ in entries)
    args: list[Arg] = [prefix, "", backend.lease]
    for queue, key in entries:
        queue.leaving(key)
        args += [queue.name, key]
    where = f"semaphores {sorted(q.name for q, _ in entries)} on {backend.describe()}"
    return (yield from backend.script(ScriptName.REMOVE_ALL, tuple(args), where))


def our_entries(pairs: Pairs) -> list[tuple[RedisQueue, str]]:
    """Each waiter's entry: its key, or the id chosen before the create."""
    out = []
    for queue, waiter in queues_of(RedisQueue, pairs):
        key = waiter.key or waiter.entry_id
        if key is not None:
            out.append((queue, key))
    return out


def delete_all(backend: RedisBackend, pairs: Pairs) -> Program[None]:
    """One script, waited for at most the request timeout; then in the background
    (``RedisBackend.removal``: also when interrupted)."""
    entries = our_entries(pairs)
    if not entries:
        return
    yield from backend.removal(
        f"removing {[k for _, k in entries]}",
        removing_all(backend, entries),
        lambda: removing_all(backend, entries),
    )


def transaction_all(
    entries: Sequence[tuple[QueueDriver, str]], token: int
) -> RedisFencedTransaction:
    queues = queues_of(RedisQueue, entries)
    (first, key), others = queues[0], queues[1:]
    return RedisFencedTransaction(first, key, token, [(q.name, k) for q, k in others])
