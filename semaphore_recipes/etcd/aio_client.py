"""The etcd client of the asyncio face: one ``grpc.aio`` channel and its auth token.

The channel is built from the same :func:`~.channel.channel_config` as the sync
:class:`~.client.EtcdClient` (target, TLS credentials, options: failover between
members, HTTP/2 keepalive, reconnect backoff), and a call is the same
:class:`~.rpc.Call` value with the same token handling (:mod:`.auth`), awaited.

Connection loss: as the sync client. A call that cannot reach a healthy member raises
:class:`~.errors.EtcdUnavailable` (it may or may not have been applied); nothing is
retried behind the caller's back; calls wait for the channel to reconnect until their
deadline (``wait_for_ready``). Cancelling the task awaiting a call cancels the call on
this side only: a request already sent may still be applied by the server.
Made and used in one event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import grpc.aio

from .._core.program import run_program_async
from ._proto import etcd_api_pb2 as pb
from .auth import REQUIRE_LEADER, Login, Metadata, Send
from .client_base import ClientBase
from .errors import EtcdError
from .rpc import Call

__all__ = ["AioEtcdClient"]

logger = logging.getLogger("semaphore_recipes.etcd")


class AioEtcdClient(ClientBase):
    """A ``grpc.aio`` connection to an etcd v3 cluster (see the module docstring); the
    arguments are :class:`~.client.EtcdClient`'s. Must be made in the event loop that
    uses it."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = 5.0,
        ca_cert: str | None = None,
        cert_key: str | None = None,
        cert_cert: str | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        super().__init__(
            endpoints,
            grpc.aio,
            timeout=timeout,
            ca_cert=ca_cert,
            cert_key=cert_key,
            cert_cert=cert_cert,
            user=user,
            password=password,
        )
        self._auth_lock = asyncio.Lock()

    async def execute(self, call: Call) -> Any:
        """Make ``call`` (the auth token added, refreshed once if refused); its reply."""
        if self._closed:
            raise EtcdError("the etcd client is closed")
        return await run_program_async(self._auth.call(call), self._send)

    async def _send(self, request: object) -> Any:
        if isinstance(request, Login):
            async with self._auth_lock:  # one login at a time; the others see its token
                return await run_program_async(self._auth.login(request.stale), self._send)
        assert isinstance(request, Send)
        call = request.call
        method = getattr(self._stubs[call.rpc.service], call.rpc.method)
        try:
            return await method(
                call.request,
                timeout=self.timeout if call.timeout is None else call.timeout,
                metadata=request.metadata,
                wait_for_ready=True,
            )
        except grpc.aio.UsageError as exc:  # the channel was closed
            raise EtcdError(f"the etcd client is closed: {exc}") from exc

    async def metadata(self, *extra: tuple[str, str]) -> Metadata:
        if self._closed:
            raise EtcdError("the etcd client is closed")
        return await run_program_async(self._auth.metadata(*extra), self._send)

    async def reauthenticate(self) -> None:
        """Authenticate again now (a stream was refused its token); failures are logged."""
        try:
            await run_program_async(self._auth.refresh(await self.metadata()), self._send)
        except EtcdError as exc:
            logger.info("etcd: authentication failed: %s", exc)

    async def open_watch_stream(self, requests: AsyncIterator[pb.WatchRequest]) -> Any:
        """A raw Watch stream call (iterate it for the responses); see :mod:`.aio_watch`."""
        metadata = await self.metadata(REQUIRE_LEADER)
        try:
            return self._stubs["Watch"].Watch(requests, metadata=metadata, wait_for_ready=True)
        except grpc.aio.UsageError as exc:
            raise EtcdError(f"client closed: {exc}") from exc

    async def open_keepalive_stream(self) -> Any:
        """A raw LeaseKeepAlive stream call (``write``/``read``); see :mod:`.aio_lease`."""
        metadata = await self.metadata(REQUIRE_LEADER)
        try:
            return self._stubs["Lease"].LeaseKeepAlive(metadata=metadata, wait_for_ready=True)
        except grpc.aio.UsageError as exc:
            raise EtcdError(f"client closed: {exc}") from exc

    async def close(self) -> None:
        """Close the channel: calls and streams in flight end."""
        if not self._closed:
            self._closed = True
            await self._channel.close()
