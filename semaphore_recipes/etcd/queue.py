"""One semaphore's queue in etcd: the etcd side of the protocol steps.

``EtcdQueue`` is the driver the base runs, made of one part per concept: the keys, the
capacity and how a call is made (``keyspace.py``), the protocol steps (``steps.py``),
job slots (``job_slots.py``), leaving and retried deletes (``leaving.py``), the status
(``status.py``), revocation (``revocation.py``); fenced writes are ``transaction.py``.

Layout (``keyspace.py``): ``<prefix><name>/config`` holds ``{"capacity": N}``; each
entry is ``<prefix><name>/entries/<lease>-<slot>`` on the session lease, ordered by
create_revision. A backend reuses its slot numbers once their entries are deleted, so
the keys under ``entries/`` stay few: etcd's range walks every key deleted since the
last compaction, and fresh keys per acquire made the enqueue slower with every grant.
A reused key is a new entry with a new create_revision (reads compare it). The enqueue
(``steps.py``) is one txn that creates our key and lists the entries below it.

When the lease ends, every waiter of the backend enqueues again on the one new lease; an
enqueue that finds its lease replaced while its txn was on its way deletes the entry it
created (by its create_revision) before trying again, so no entry outlives its acquire.

Each step is a program (:mod:`.runner`) that both faces run: blocking for
``sr.connect``, awaited for ``sr.aio.connect`` (same requests, same retries, same
errors). Connection loss: a step retries UNAVAILABLE within its deadline (the acquire's,
or the request timeout), then AcquireTimeout / BackendUnavailable; a delete that cannot
reach etcd goes on in the background until the queue closes. A cancelled asyncio acquire
deletes its entry in the background, after its create's outcome if the create was still
on its way (the cancel does not un-send it).
"""

from __future__ import annotations

from .._core.program import Program
from .job_slots import SlotRecords
from .revocation import Revocation
from .status import StatusReading
from .steps import ProtocolSteps
from .transaction import EtcdFencedTransaction

__all__ = ["EtcdFencedTransaction", "EtcdQueue"]


class EtcdQueue(ProtocolSteps, SlotRecords, StatusReading, Revocation):
    """One semaphore's queue, made by the :meth:`EtcdBackend.open_queue` program (its
    :meth:`open`): each step is a program that the backend's runner (:mod:`.runner`)
    runs, blocking or awaited."""

    def open(self, capacity: int | None, adopt_capacity: bool, create: bool) -> Program[EtcdQueue]:
        """Agree on the capacity (creating the semaphore if ``create``), then watch it."""
        yield from self.opening(capacity, adopt_capacity, create)
        self.backend.register_queue(self)
        return self

    def transaction(self, key: str, token: int) -> EtcdFencedTransaction:
        """Fenced by the permit's own token: once released, its key may serve a newer
        entry of this backend, which must not let the old permit's writes through."""
        return EtcdFencedTransaction(self, self.entry_key(key), token)
