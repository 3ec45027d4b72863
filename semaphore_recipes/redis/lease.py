"""The client's lease: a key with a TTL of the session timeout, renewed by a thread.

Redis has no sessions. Each backend makes a lease key (``P:lease:<id>``, random id)
with a TTL equal to its session timeout and renews it every third of that; its entries
name the lease, and an entry whose lease key is gone is dead for every script. A
renewal never re-creates an expired lease (``PEXPIRE`` of a missing key does nothing):
the keeper then reports the session LOST and makes a new lease.

A lease found gone, or renewed, on a data set whose counter went back (:mod:`.history`: restarted
without persistence, flushed, an outdated replica promoted) ends the backend instead:
permits LOST and waiters failing with StoreHistoryReset's reason.

What users see: the renewal failing (connection lost) makes held permits SUSPENDED;
a renewal that works again makes them HELD; a lease found gone, or a whole session
timeout without a renewal (the server has expired it, or will before we could say
otherwise), makes them LOST and sends waiters back into the queue with a new lease.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from ..backend import Deadline
from ..errors import BackendUnavailable
from .calls import SyncRunner, call
from .scripts import ScriptName

if TYPE_CHECKING:
    from .backend import RedisBackend

log = logging.getLogger("semaphore_recipes.redis")

#: how long stop() waits for the thread: a call in flight ends with its connection,
#: which close() closes next (a daemon thread; close() stays within its bound)
STOP_WAIT = 0.2
#: how often a renewal is tried again while the server does not answer
RETRY_INTERVAL = 0.2


def new_lease_id() -> str:
    return secrets.token_hex(8)


class LeaseKeeper:
    """Renews ``backend``'s lease on its own thread and connection."""

    def __init__(self, backend: RedisBackend, runner: SyncRunner) -> None:
        self.backend = backend
        self.runner = runner
        self.ttl = backend.params.session_timeout
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="semaphore-recipes-redis-lease", daemon=True
        )
        self._last_renewed = time.monotonic()
        self._suspended = False

    def create(self, lease: str, bound: Deadline) -> None:
        """Make the lease ``lease`` on the server (blocking; at connect, and after a loss)."""
        made = self.runner.run(self._new_lease(lease, bound))
        if not made:  # a random 64-bit id taken: nothing to retry but a new id
            raise RuntimeError(f"lease id {lease} already exists")
        self._last_renewed = time.monotonic()

    def _new_lease(self, lease: str, bound: Deadline) -> Generator[object, object, Any]:
        args = (self.backend.params.prefix, "", lease, int(self.ttl * 1000), self.backend.owner)
        return call(
            ScriptName.NEW_LEASE,
            args,
            where=self.backend.describe(),
            bound=bound,
            params=self.backend.params,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT)

    def lease_gone(self) -> None:
        """A script found our lease gone: renew (and so replace it) now."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(RETRY_INTERVAL if self._suspended else self.ttl / 3)
            self._wake.clear()
            if self._stop.is_set():
                return
            self._renew_once()

    def _renew_once(self) -> None:
        lease = self.backend.lease
        args = (self.backend.params.prefix, "", lease, int(self.ttl * 1000))
        bound = Deadline(self.backend.request_timeout, time.monotonic)
        where = f"renewing lease {lease}"
        seen = self.backend.history.counter  # (before sending: see StoreHistory.behind)
        try:
            renewed = self.runner.run(
                call(
                    ScriptName.RENEW,
                    args,
                    where=where,
                    bound=bound,
                    retry=False,
                    params=self.backend.params,
                )
            )
        except BackendUnavailable as exc:
            if self._stop.is_set():
                return
            if not self._suspended:
                self._suspended = True
                log.warning("redis lease %s: renewal failed (%s): permits suspended", lease, exc)
                self.backend.session_suspended()
            if time.monotonic() - self._last_renewed > self.ttl:
                self._replace(lease, "no renewal for a whole session timeout")
            return
        except Exception:
            if not self._stop.is_set():  # (closed under a call in flight: nothing to say)
                log.exception("redis lease %s: renewal failed", lease)
            return
        if renewed:
            self._last_renewed = time.monotonic()
            if self._suspended:
                self._suspended = False
                log.info("redis lease %s renewed again: permits restored", lease)
                self.backend.session_restored()
            self.backend.check_holders(self.runner)
            # the counter came with the renewal: no other request on the keeper's path,
            # whose timing tells a cut connection (a read here delayed the next renewal)
            behind = self.backend.history.behind(int(renewed[1]), seen, self.backend.describe())
            if behind is not None:  # a failover lost writes this client saw: over
                self.backend.history_restarted(behind)
                return
            self.backend.history.note_counter(int(renewed[1]))
            if self.backend.history.run_id is None:  # once, just after a reply came
                self.backend.history.note(self.runner.client)
            return
        self._replace(lease, "the lease expired on the server")

    def _replace(self, old: str, why: str) -> None:
        """The lease ``old`` is over: make a new one, then tell permits and waiters."""
        if self.backend.lease != old:
            return
        went_back = self.backend.history.went_back(self.runner.client, self.backend.describe())
        if went_back is not None:  # no new lease: the backend is over
            self.backend.history_restarted(went_back)
            return
        lease = new_lease_id()
        try:
            self.create(lease, Deadline(self.backend.request_timeout, time.monotonic))
        except Exception as exc:  # unreachable still: tell now, make the lease later
            log.warning("redis lease %s: %s; no new lease yet (%s)", old, why, exc)
            self.backend.session_ended(old, None, why)
            return
        self._suspended = False
        self.backend.session_ended(old, lease, why)
