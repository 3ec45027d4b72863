"""Keeping one lease alive for the asyncio face: off the event loop, reported to it.

A loop running thousands of tasks can go seconds without running any given callback
(every callback ready at the start of a turn runs before the next poll), and a keeper
that is a task of that loop misses its keepalives: the lease expires while the process
is only busy. So the asyncio face's keeper is the sync face's
:class:`~.lease.LeaseKeeper` (its threads, the same decisions: :mod:`.lease_health`)
over the client's own blocking connection
(:attr:`~.aio_client.AioEtcdClient.keepalive_client`, one per client, closed with it),
and only its reports are handed to the event loop (``call_soon_threadsafe``) to run
there: ``on_suspended``, ``on_restored``, ``on_expired``, in the order they were made.
Connection loss, expiry, auth token refresh: as :class:`~.lease.LeaseKeeper`. Once the
loop is closed (its program ended without closing the backend) the keeper stops by
itself and the lease expires, as a task of that loop would have; a report made then is
dropped (nothing is left there to hear it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .aio_client import AioEtcdClient
from .lease import LeaseKeeper

__all__ = ["AsyncLeaseKeeper"]

logger = logging.getLogger("semaphore_recipes.etcd")


class AsyncLeaseKeeper(LeaseKeeper):
    """Keep a lease alive from threads, reporting to the event loop; see the module
    docstring. :meth:`start` in the running loop (its reports go there); :meth:`stop`
    ends the threads without blocking the loop (it does not revoke the lease)."""

    def __init__(
        self,
        client: AioEtcdClient,
        lease_id: int,
        ttl: float,
        *,
        on_expired: Callable[[], None],
        on_suspended: Callable[[], None],
        on_restored: Callable[[], None],
        interval: float | None = None,
        suspend_after: float | None = None,
    ) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None  # set by start()
        super().__init__(
            client.keepalive_client,
            lease_id,
            ttl,
            on_expired=self._in_loop(on_expired),
            on_suspended=self._in_loop(on_suspended),
            on_restored=self._in_loop(on_restored),
            interval=interval,
            suspend_after=suspend_after,
            wanted=self._loop_open,
            start=False,
        )

    def start(self) -> None:
        """Start the threads; their reports go to the running loop."""
        self._loop = asyncio.get_running_loop()
        super().start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop sending keepalives: the stream is cancelled and the threads end by
        themselves at once (``timeout`` is not waited for: the loop is not blocked)."""
        super().stop(timeout=0)

    def _loop_open(self) -> bool:
        return self._loop is None or not self._loop.is_closed()

    def _in_loop(self, report: Callable[[], None]) -> Callable[[], None]:
        """``report``, made on a keeper thread, to be run by the loop."""

        def hand_over() -> None:
            loop = self._loop
            assert loop is not None  # (reports come only after start)
            try:
                loop.call_soon_threadsafe(report)
            except RuntimeError:  # the loop is closed
                logger.debug("etcd: lease %x: a report after its loop closed", self.lease_id)

        return hand_over
