"""What a lease's keepalive acknowledgements say: suspended, restored, expired.

The decisions of the keeper (:mod:`.lease`, threads; the asyncio face's reports to its
event loop: :mod:`.aio_lease`), without I/O: acknowledgements overdue for
``suspend_after`` seconds suspend the lease (once per episode); an acknowledgement
after that restores it; a reply with TTL <= 0 or "lease not found" expires it (once,
for good). Connection loss alone never expires it (a new etcd leader renews every
lease). Each change calls its callback (exceptions logged, never raised).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .callbacks import run_callback

__all__ = ["KeeperBase", "LeaseHealth"]

logger = logging.getLogger("semaphore_recipes.etcd")


class LeaseHealth:
    """The state of one kept lease; thread-safe (one report at a time)."""

    def __init__(
        self,
        lease_id: int,
        ttl: float,
        *,
        on_expired: Callable[[], None],
        on_suspended: Callable[[], None],
        on_restored: Callable[[], None],
        interval: float | None = None,
        suspend_after: float | None = None,
    ) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.lease_id = lease_id
        self.ttl = float(ttl)
        self.interval = ttl / 3.0 if interval is None else float(interval)
        self.suspend_after = 2.0 * ttl / 3.0 if suspend_after is None else float(suspend_after)
        self._on_expired = on_expired
        self._on_suspended = on_suspended
        self._on_restored = on_restored
        self._report_lock = threading.Lock()
        self.last_ack = time.monotonic()
        self.suspended = False
        self.expired = False
        self.stopped = False  #: no more reports (stopped by its keeper, or expired)

    def started(self) -> None:
        """The keeper starts: acknowledgements are due from now."""
        self.last_ack = time.monotonic()

    def overdue(self) -> bool:
        return time.monotonic() - self.last_ack > self.suspend_after

    def check(self) -> None:
        """Suspend if acknowledgements are overdue (reported once per episode)."""
        with self._report_lock:
            if self.suspended or not self.overdue() or self.stopped:
                return
            self.suspended = True
            logger.warning(
                "etcd: lease %x: no keepalive acknowledged for %.2f s, suspended",
                self.lease_id,
                time.monotonic() - self.last_ack,
            )
            run_callback("on_suspended", self._on_suspended)

    def acknowledged(self, ttl: int) -> bool:
        """A keepalive reply with ``ttl``: restores a suspended lease, or expires it
        (TTL <= 0). False when the lease is gone (the keeper ends)."""
        if ttl <= 0:
            self.expire(f"server answered TTL {ttl}")
            return False
        self.last_ack = time.monotonic()
        if not self.suspended:
            return True
        with self._report_lock:
            if not self.suspended or self.stopped:
                return True
            self.suspended = False
            logger.info("etcd: lease %x: keepalives acknowledged again", self.lease_id)
            run_callback("on_restored", self._on_restored)
        return True

    def next_check(self, opened: float) -> float:
        """Seconds until acknowledgements are overdue (<= 0: now). Once suspended, a
        stream opened at ``opened`` gets ``suspend_after`` of its own before it is
        recycled again."""
        ref = max(self.last_ack, opened) if self.suspended else self.last_ack
        return ref + self.suspend_after - time.monotonic()

    def watchdog_turn(self, opened: float) -> tuple[bool, float]:
        """A keeper's watchdog wakes: ``(recycle, pause)``. ``recycle``: acknowledgements
        are overdue (the suspension is reported), the stream opened at ``opened`` is to be
        replaced; ``pause``: how long the watchdog sleeps before its next turn (after a
        recycle, until the re-opened stream has had its chance)."""
        wait = self.next_check(opened)
        if wait > 0:
            return False, max(0.01, min(wait, self.interval))
        self.check()
        return True, self.interval

    def expire(self, why: str) -> None:
        """The server said the lease is gone: reported once, then no more reports."""
        with self._report_lock:
            if self.expired:
                return
            self.expired = self.stopped = True
        logger.warning("etcd: lease %x expired (%s)", self.lease_id, why)
        run_callback("on_expired", self._on_expired)


class KeeperBase:
    """What a keeper has: the lease, its :class:`LeaseHealth` and what it says."""

    def __init__(
        self,
        lease_id: int,
        ttl: float,
        *,
        on_expired: Callable[[], None],
        on_suspended: Callable[[], None],
        on_restored: Callable[[], None],
        interval: float | None,
        suspend_after: float | None,
    ) -> None:
        self.health = LeaseHealth(
            lease_id,
            ttl,
            on_expired=on_expired,
            on_suspended=on_suspended,
            on_restored=on_restored,
            interval=interval,
            suspend_after=suspend_after,
        )
        self.lease_id = lease_id
        self.ttl = self.health.ttl
        self.interval = self.health.interval
        self.suspend_after = self.health.suspend_after

    @property
    def last_ack(self) -> float:
        """``time.monotonic()`` of the last acknowledged keepalive (or of the start)."""
        return self.health.last_ack

    @property
    def suspended(self) -> bool:
        """True while acknowledgements are overdue."""
        return self.health.suspended

    @property
    def expired(self) -> bool:
        """True once the server said the lease is gone."""
        return self.health.expired
