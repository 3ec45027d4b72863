"""Keeping one lease alive from a task of the event loop (the asyncio face's keeper).

The same behaviour as the sync face's :class:`~.lease.LeaseKeeper` (a thread), with the
same decisions (:class:`~.lease_health.LeaseHealth`): one LeaseKeepAlive stream, a
keepalive every ``ttl / 3`` seconds; no acknowledgement for ``2/3 * ttl``: the lease
is SUSPENDED (``on_suspended``, once per episode) and the silent stream is replaced by
a watchdog task; acknowledgements again: ``on_restored``; the server says TTL <= 0 or
"lease not found": ``on_expired``, once, and the keeper ends. Connection loss alone
never expires the lease (a new etcd leader renews every lease), so a keeper cut off
for good stays suspended. Stream errors are logged and the stream is opened again
with a backoff from 50 ms to ``ttl / 6``. Callbacks run in the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from ._proto import etcd_api_pb2 as pb
from .aio_client import AioEtcdClient
from .errors import EtcdAuthError, EtcdError, EtcdLeaseNotFound, is_invalid_token, map_rpc_error
from .lease_health import KeeperBase
from .retry import Backoff

__all__ = ["AsyncLeaseKeeper"]

logger = logging.getLogger("semaphore_recipes.etcd")


class AsyncLeaseKeeper(KeeperBase):
    """Keep a lease alive from two tasks (the stream, the watchdog); see the module
    docstring. :meth:`start` in the running loop; :meth:`stop` ends them (it does not
    revoke the lease)."""

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
        super().__init__(
            lease_id,
            ttl,
            on_expired=on_expired,
            on_suspended=on_suspended,
            on_restored=on_restored,
            interval=interval,
            suspend_after=suspend_after,
        )
        self.client = client
        self._tasks: list[asyncio.Task[None]] = []
        self._attempt: asyncio.Task[bool] | None = None  # the stream open now
        self._opened = time.monotonic()
        self._stale = False  # the watchdog cancelled a silent stream

    @property
    def running(self) -> bool:
        return any(not task.done() for task in self._tasks)

    def start(self) -> None:
        self.health.started()
        self._tasks = [
            asyncio.ensure_future(self._run()),
            asyncio.ensure_future(self._watch_acks()),
        ]

    def stop(self, timeout: float | None = None) -> None:
        """End the tasks (at their next await; ``timeout`` is not waited for)."""
        self.health.stopped = True
        for task in self._tasks:
            task.cancel()

    def _going(self) -> bool:
        return not self.health.stopped and not self.client.closed

    async def _run(self) -> None:
        backoff = Backoff(0.05, max(0.05, self.health.ttl / 6.0))
        while self._going():
            self._stale = False
            self._opened = time.monotonic()
            attempt = asyncio.ensure_future(self._stream(backoff))
            self._attempt = attempt
            try:
                # (wait, not await: the watchdog's cancel of the attempt is not ours)
                await asyncio.wait({attempt})
            except asyncio.CancelledError:
                attempt.cancel()
                raise
            finally:
                self._attempt = None
            if not attempt.cancelled() and not attempt.result():
                return  # expired, or the client closed
            self.health.check()
            if self._stale:
                continue  # re-open at once; the server may just have been slow
            await asyncio.sleep(backoff.next())
            self.health.check()

    async def _stream(self, backoff: Backoff) -> bool:
        """One keepalive stream, until it breaks: False when the keeper is done."""
        try:
            call = await self.client.open_keepalive_stream()
            sender = asyncio.ensure_future(self._send(call))
            try:
                while True:
                    reply = await call.read()
                    if reply is grpc.aio.EOF:
                        return self._going()
                    if not self.health.acknowledged(reply.TTL):
                        return False
                    backoff.reset()
            finally:
                sender.cancel()
                call.cancel()
        except grpc.RpcError as exc:
            if not self._going():
                return False
            err = map_rpc_error(exc)
            if isinstance(err, EtcdLeaseNotFound):
                self.health.expire(str(err))
                return False
            logger.info("etcd: lease %x: keepalive stream failed: %s", self.lease_id, err)
            if isinstance(err, EtcdAuthError) and is_invalid_token(exc):
                await self.client.reauthenticate()
            return True
        except EtcdError as exc:  # closed client, or authentication failed
            if not self._going():
                return False
            logger.info("etcd: lease %x: cannot open keepalive stream: %s", self.lease_id, exc)
            return True

    async def _send(self, call: Any) -> None:
        """One keepalive now, then every interval (ends with the stream)."""
        request = pb.LeaseKeepAliveRequest(ID=self.lease_id)
        try:
            while True:
                await call.write(request)
                await asyncio.sleep(self.interval)
        except Exception:  # (an RpcError, or a write after the call ended)
            return  # the stream broke: its reader reports it

    async def _watch_acks(self) -> None:
        """The watchdog: reports the suspension when acknowledgements are overdue and
        cancels the silent stream, so that a fresh one is opened."""
        cancelled: asyncio.Task[bool] | None = None
        while self._going():
            attempt = self._attempt
            recycle, pause = self.health.watchdog_turn(self._opened)
            if recycle and attempt is not None and attempt is not cancelled:
                self._stale = True
                attempt.cancel()
                cancelled = attempt
            await asyncio.sleep(pause)
