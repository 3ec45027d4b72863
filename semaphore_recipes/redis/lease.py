"""The client's lease: a key with a TTL of the session timeout, renewed by a thread.

Redis has no sessions. Each backend makes a lease key (``P:lease:<id>``, random id)
with a TTL equal to its session timeout and renews it every third of that; its entries
name the lease, and an entry whose lease key is gone is dead for every script. A
renewal never re-creates an expired lease (``PEXPIRE`` of a missing key does nothing):
the keeper then reports the session LOST and makes a new lease.

On Redis Cluster a script reads only keys of its own hash slot, so the lease exists
under each key prefix in use (``P:{T}:lease:<id>``, :mod:`.layout`): made with the
first semaphore of a tag, renewed with the others (a call each), and one found gone
ends the whole lease, as on one primary.

A lease found gone on a data set whose counter went back (:mod:`.history`: restarted
without persistence, flushed, an outdated replica promoted) ends the backend instead:
permits LOST and waiters failing with StoreHistoryReset's reason. So does a renewal
whose counter is lower than one seen before it was sent: a replica promoted with the
lease but without the latest grants (tokens would be handed out again).

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
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..backend import Deadline, vouched_since
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

    def create(self, lease: str, prefixes: Sequence[str], bound: Deadline) -> None:
        """Make the lease ``lease`` under each key prefix of ``prefixes`` on the server
        (blocking; at connect, and after a loss)."""
        sent = time.monotonic()
        for prefix in prefixes:
            made = self.runner.run(self.backend.new_lease(prefix, lease, bound))
            if not made:  # a random 64-bit id taken: nothing to retry but a new id
                raise RuntimeError(f"lease id {lease} already exists")
        self.backend.note_leased(lease, prefixes)
        self._last_renewed = sent

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

    def vouched(self) -> bool:
        """Is the lease surely alive now (``backend.session_vouched``)?"""
        return vouched_since(self._last_renewed, self.ttl)

    def _renew_once(self) -> None:
        lease = self.backend.lease
        sent = time.monotonic()  # (the server's expiry counts from later)
        bound = Deadline(self.backend.request_timeout, time.monotonic)
        where = f"renewing lease {lease}"
        renewed: list[tuple[str, int]] = []
        try:
            for prefix in self.backend.lease_prefixes():
                args = (prefix, "", lease, int(self.ttl * 1000))
                renewal = call(
                    ScriptName.RENEW,
                    args,
                    where=where,
                    bound=bound,
                    retry=False,
                    params=self.backend.params,
                )
                seen = self.backend.history.counter(prefix)  # (before the renewal is sent)
                reply = self.runner.run(renewal)
                if not reply:
                    self._replace(lease, f"the lease expired on the server ({prefix})")
                    return
                if int(reply[1]) < seen:  # (a failover lost writes the lease outlived)
                    self.backend.history_restarted(
                        self.backend.history.behind(prefix, int(reply[1]), seen, where)
                    )
                    return
                renewed.append((prefix, int(reply[1])))
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
        self._last_renewed = sent
        if self._suspended:
            self._suspended = False
            log.info("redis lease %s renewed again: permits restored", lease)
            self.backend.session_restored()
        self.backend.check_holders(self.runner)
        # the counters came with the renewals: no other request on the keeper's path,
        # whose timing tells a cut connection (a read here delayed the next renewal)
        for prefix, counter in renewed:
            self.backend.history.note_counter(prefix, counter)
        if self.backend.history.run_id is None and renewed:  # once, after a reply came
            self.backend.history.note(self.runner.client, renewed[0][0])

    def _replace(self, old: str, why: str) -> None:
        """The lease ``old`` is over: make a new one, then tell permits and waiters."""
        if self.backend.lease != old:
            return
        went_back = self.backend.history.went_back(self.runner.client, self.backend.describe())
        if went_back is not None:  # no new lease: the backend is over
            self.backend.history_restarted(went_back)
            return
        lease = new_lease_id()
        prefixes = self.backend.lease_prefixes()  # (none yet: made when first needed)
        try:
            self.create(lease, prefixes, Deadline(self.backend.request_timeout, time.monotonic))
        except Exception as exc:  # unreachable still: tell now, make the lease later
            log.warning("redis lease %s: %s; no new lease yet (%s)", old, why, exc)
            self.backend.session_ended(old, None, why)
            return
        self._suspended = False
        self.backend.session_ended(old, lease, why, prefixes)
