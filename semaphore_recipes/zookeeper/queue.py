"""One semaphore's queue in ZooKeeper: the kazoo side of the protocol steps.

``ZooKeeperQueue`` is the driver the base runs, made of one part per concept: the node
and its capacity (``node.py``), the protocol steps (``steps.py``), job slots
(``slots.py``), leaving and deletes in the background (``leaving.py``), the status
(``status.py``), revocation (``revocation.py``); fenced writes are ``transaction.py``.

Both faces run the same steps: each is written once as a program that yields its bound,
then the kazoo requests in flight (or "wait until connected"), and the backend's runner
runs it blocking (``run``) or awaited (``run_async``; ``._waits``); the asyncio face is
woken by kazoo's callback thread through the event loop, with no thread of its own.

Connection loss: a step waits for the connection to come back (within the acquire's
deadline) and goes on; a create whose reply was lost is looked for by its entry id
before creating again. Session expiry: the entries die with the session; a waiter
enters the queue again with kazoo's new session (see ``backend.py``). A cancelled or
interrupted acquire starts the delete of its entry (found by its id when the create's
reply has not come yet) and does not wait for it.

Bounds: the protocol steps wait within the acquire's deadline; every other call
(opening, status, set_capacity, a fenced commit, release) waits at most the backend's
request timeout for kazoo's replies, then raises BackendUnavailable (release logs and
goes on in the background instead).
"""

from __future__ import annotations

from .leaving import Leaving
from .revocation import Revocation
from .status import StatusReading
from .transaction import ZooKeeperFencedTransaction

__all__ = ["ZooKeeperFencedTransaction", "ZooKeeperQueue"]


class ZooKeeperQueue(Leaving, StatusReading, Revocation):
    """One semaphore's queue: the driver the base runs, made of its parts (the node and
    its capacity ``node.py``; the protocol steps ``steps.py``; job slots ``slots.py``;
    leaving ``leaving.py``; status ``status.py``)."""

    mark_records_weight = False  # an entry's name carries its weight

    def transaction(self, key: str, token: int) -> ZooKeeperFencedTransaction:
        # An entry's name is never reused (unique id and sequence): its existence is the fence.
        return ZooKeeperFencedTransaction(self, f"{self.path}/{key}")
