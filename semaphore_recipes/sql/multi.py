"""Several semaphores at once in a SQL database: one call creates a request's entries,
one removes them.

``enqueue_all`` locks the semaphores' rows in name order (so two such requests never
deadlock) and takes one token for every entry: each entry's place in its queue and the
permit's one fencing token, so two requests are ordered alike in every queue. The
entries share one client-made id: a retry after a lost reply finds them (all or none
were made). Admission is each queue's, as for one entry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..backend import Deadline, Enqueued, Program, QueueDriver, Waiter, queues_of
from ..errors import Draining, SemaphoreNotFound
from .queue import EntryView, SQLQueue

if TYPE_CHECKING:
    from .store import SQLBackend

Pairs = Sequence[tuple[QueueDriver, Waiter]]


def enqueue_all(
    backend: SQLBackend, pairs: Pairs, deadline: Deadline
) -> Program[dict[str, Enqueued]]:
    """The EnqueueAll step (a program, run by either face)."""
    backend.check_open()  # (before an entry id is chosen: nothing to abandon)
    queues = queues_of(SQLQueue, pairs)
    where = f"semaphores {sorted(q.name for q, _ in queues)} on {backend.describe()}"
    for queue, waiter in queues:
        queue.drop_route(waiter.entry_id)
    while True:
        session = backend.session
        entry_id = backend.new_entry_id()
        for queue, waiter in queues:
            queue.creating(waiter, entry_id)
        raw = yield from backend.step(
            "enqueue_all",
            (
                entry_id,
                session,
                queues[0][1].owner,
                [q.name for q, _ in queues],
                [w.weight for _, w in queues],
            ),
            where,
            deadline=deadline,
        )
        reply = json.loads(raw or '["missing"]')
        if reply[0] != "ok":
            for queue, _ in queues:
                queue.drop_route(entry_id)
            if reply[0] == "lost":  # our session expired: the keeper makes a new one
                yield from backend.await_new_session(session, deadline)
                continue
            if reply[0] in ("partial", "gone"):  # swept after a lost reply, or abandoned
                continue
            if reply[0] == "draining":  # (nothing was made)
                raise Draining(str(reply[1]))
            missing = [q.name for q, _ in queues]
            raise SemaphoreNotFound(", ".join(missing), backend.describe())
        views = [EntryView.parse(view) for view in reply[1:]]
        for (_, waiter), view in zip(queues, views, strict=True):
            waiter.created(entry_id, view.token)
        return {
            queue.name: queue.enqueued(waiter, entry_id, view)
            for (queue, waiter), view in zip(queues, views, strict=True)
        }


def removing_all(backend: SQLBackend, entries: Sequence[tuple[SQLQueue, str]]) -> Program[None]:
    for queue, key in entries:
        queue.leaving(key)
    yield from backend.step(
        "remove",
        ([q.name for q, _ in entries], [k for _, k in entries], backend.session, True),
        f"semaphores {sorted(q.name for q, _ in entries)} on {backend.describe()}",
    )


def delete_all(backend: SQLBackend, pairs: Pairs) -> Program[None]:
    """One statement, waited for at most the request timeout; then in the background."""
    entries = []
    for queue, waiter in queues_of(SQLQueue, pairs):
        key = waiter.key or waiter.entry_id
        if key is not None:
            entries.append((queue, key))
    if entries:
        yield from backend.removal(
            f"removing {[k for _, k in entries]}",
            removing_all(backend, entries),
            lambda: removing_all(backend, entries),
        )
