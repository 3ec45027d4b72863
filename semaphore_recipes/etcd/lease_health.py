"""What a lease's keepalive acknowledgements say: suspended, restored, expired.

The decisions of both keepers (the sync face's thread, :mod:`.lease`, and the asyncio
face's task, :mod:`.aio_lease`), without I/O: acknowledgements overdue for
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

__all__ = ["LeaseHealth"]

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

    def expire(self, why: str) -> None:
        """The server said the lease is gone: reported once, then no more reports."""
        with self._report_lock:
            if self.expired:
                return
            self.expired = self.stopped = True
        logger.warning("etcd: lease %x expired (%s)", self.lease_id, why)
        run_callback("on_expired", self._on_expired)
