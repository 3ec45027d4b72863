"""How waiters learn: the client's inbox, read by one thread, and the timed looks.

The scripts push a message to a client's inbox list (``P:inbox:<lease>``; on Redis
Cluster one per hash tag) for each of its entries they admit, and for each of its
entries someone else removed: a release wakes exactly the waiters it admits, never the
others (no herd). One thread per backend reads the inbox (:mod:`.inbox`: ``BLPOP``, or
the doorbells of a cluster) on a connection of its own and hands each message to its
queue. A semaphore opened without writing (``create=False``, a read-only user) is not
told of capacity changes: the thread reads its capacity each ``CAPACITY_LOOK`` until an
entry of ours makes the client one of its openers. The same thread runs the timed
looks (``CHECK``) of waiters that depend on a lease: a crashed holder's lease expires
without any script running, and only a look notices. After the connection was lost,
every waiting entry looks once (a list keeps its messages while we are away, but the
lease, and its inbox, may have expired).
A primary demoted by a Sentinel failover ends a waiting ``BLPOP`` with ``UNBLOCKED``:
taken as a lost connection (the next read, refused with ``READONLY``, reconnects to the
new primary).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING

import redis

from ..backend import Deadline
from ..errors import SemaphoreError
from .calls import TRANSIENT, SyncRunner, call
from .inbox import InboxDoorbells, InboxList, InboxReader
from .queue import RedisQueue, decode_message, parse_slots
from .scripts import ScriptName

if TYPE_CHECKING:
    from .backend import RedisBackend

log = logging.getLogger("semaphore_recipes.redis")

#: the longest a BLPOP waits, so that a stop or a timed look is never late by more
POLL = 0.5
#: how long stop() waits for the thread: a call in flight ends with its connection,
#: which close() closes next (a daemon thread; close() stays within its bound)
STOP_WAIT = 0.2
#: the pause after the connection failed, before reading again
RECONNECT_PAUSE = 0.2
#: how often a semaphore opened without writing reads its capacity (it is not told)
CAPACITY_LOOK = 1.0


class Notifier:
    """Reads ``backend``'s inbox and runs the timed looks, on one thread."""

    def __init__(self, backend: RedisBackend, runner: SyncRunner) -> None:
        self.backend = backend
        self.runner = runner
        self.inbox: InboxReader = (
            InboxList(runner.client)
            if backend.layout.is_global()
            else InboxDoorbells(runner.client)
        )
        self._lock = threading.Lock()
        self._timers: list[tuple[float, int, RedisQueue, str]] = []
        self._seq = itertools.count()
        self._next_capacity_look = time.monotonic() + CAPACITY_LOOK
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="semaphore-recipes-redis-notifier", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT)
        self.inbox.close()

    def schedule(self, queue: RedisQueue, entry_id: str, delay: float) -> None:
        """Look at ``entry_id`` of ``queue`` in ``delay`` seconds (once)."""
        with self._lock:
            due = time.monotonic() + delay
            heapq.heappush(self._timers, (due, next(self._seq), queue, entry_id))

    def _due(self) -> tuple[list[tuple[RedisQueue, str]], float]:
        now = time.monotonic()
        ready: list[tuple[RedisQueue, str]] = []
        with self._lock:
            while self._timers and self._timers[0][0] <= now:
                _, _, queue, entry_id = heapq.heappop(self._timers)
                ready.append((queue, entry_id))
            wait = self._timers[0][0] - now if self._timers else POLL
        return ready, max(0.01, min(POLL, wait))

    def _run(self) -> None:
        missed = False
        while not self._stop.is_set():
            ready, wait = self._due()
            try:
                if missed:
                    ready += [
                        (queue, entry_id)
                        for queue in self.backend.queues()
                        for entry_id in queue.waiting_entries()
                    ]
                    missed = False
                for queue, entry_id in ready:
                    self.runner.run(queue.check(entry_id))
                self._look_at_capacities()
                inboxes = [self.backend.inbox_key(p) for p in self.backend.lease_prefixes()]
                if not inboxes:  # (Redis Cluster, before the first semaphore's lease)
                    self._stop.wait(wait)
                    continue
                messages = self.inbox.wait(inboxes, wait)
            except Exception as exc:
                if self._stop.is_set():
                    return  # (closed under a call in flight)
                if isinstance(exc, (*TRANSIENT, SemaphoreError)) or _unblocked(exc):
                    if not missed:
                        log.info("redis notifier: %s; looking again once connected", exc)
                    missed = True
                else:
                    log.exception("redis notifier: unexpected error")
                self._stop.wait(RECONNECT_PAUSE)
                continue
            for raw in messages:
                self._deliver(raw)

    def _look_at_capacities(self) -> None:
        """Once a ``CAPACITY_LOOK``: the capacity of each semaphore opened without
        writing (``RedisQueue.looks_at_capacity``), read."""
        if time.monotonic() < self._next_capacity_look:
            return
        self._next_capacity_look = time.monotonic() + CAPACITY_LOOK
        for queue in self.backend.queues():
            if queue.looks_at_capacity:
                self.runner.run(queue.look_at_capacity())

    def _deliver(self, raw: bytes) -> None:
        message = decode_message(raw)
        if message is None:
            log.warning("redis notifier: unreadable message %r", raw)
            return
        entry_id = str(message.get("k"))
        name = str(message.get("n"))
        acknowledged = self._replicated(name) if message.get("x") == "admitted" else None
        # (every semaphore object of that name: the one whose entry it is acts on it)
        for queue in self.backend.queues(name):
            if message.get("x") == "admitted":
                slots = parse_slots(message.get("z") or ())
                queue.admitted(entry_id, int(message["c"]), int(message["v"]), slots, acknowledged)
            elif message.get("x") == "deleted":
                queue.deleted(entry_id)
            elif message.get("x") == "revoke":
                queue.revoke_requested(entry_id)
            elif message.get("x") == "capacity":  # (``d``: the drain flag, when it changed)
                draining = message.get("d")
                queue.apply_capacity(
                    int(message["c"]),
                    int(message["v"]),
                    None if draining is None else bool(draining),
                )

    def _replicated(self, name: str) -> int | None:
        """With ``wait_replicas``: how many replicas have every write made so far,
        the grant we were told of among them (a write of ours, the lease's renewal,
        then WAIT on the same connection: the grant came before it in the stream)."""
        replicas = self.backend.params.wait_replicas
        if not replicas:
            return None
        lease = self.backend.lease
        args = (
            self.backend.layout.of(name),
            "",
            lease,
            int(self.backend.params.session_timeout * 1000),
        )
        bound = Deadline(self.backend.request_timeout, time.monotonic)
        try:
            _, acknowledged = self.runner.run(
                call(
                    ScriptName.RENEW,
                    args,
                    where="wait_replicas",
                    bound=bound,
                    replicas=replicas,
                    max_wait=self.backend.request_timeout,
                )
            )
        except SemaphoreError:
            return 0
        return int(acknowledged)


def _unblocked(exc: Exception) -> bool:
    """The server ended a blocking read because it stopped being the primary."""
    return isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("UNBLOCKED")
