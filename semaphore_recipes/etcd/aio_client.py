"""The etcd client of the asyncio face: one ``grpc.aio`` channel and its auth token.

The channel is built from the same :func:`~.channel.channel_config` as the sync
:class:`~.client.EtcdClient` (target, TLS credentials, options: failover between
members, HTTP/2 keepalive, reconnect backoff), and a call is the same
:class:`~.rpc.Call` value with the same token handling (:mod:`.auth`), awaited.

Connection loss: as the sync client. A call that cannot reach a healthy member raises
:class:`~.errors.EtcdUnavailable` (it may or may not have been applied); nothing is
retried behind the caller's back; calls wait for the channel to reconnect until their
deadline (``wait_for_ready``). Cancelling the task awaiting a call cancels the call on
this side only: a request already sent may still be applied by the server. So a call
that may create a queue entry (:attr:`.rpc.Call.creates`) is not cancelled with its
task; :meth:`AioEtcdClient.settled` waits for its end, after which the entry's undo
may be sent.
Made and used in one event loop. The lease keeper of the asyncio face does not use the
loop: it has a blocking client of its own, :attr:`AioEtcdClient.keepalive_client`, to
the same members with the same credentials, closed with this one (:mod:`.aio_lease`).
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
from .client import EtcdClient
from .client_base import ClientBase
from .errors import EtcdError, map_rpc_error
from .rpc import Call

__all__ = ["AioEtcdClient"]

logger = logging.getLogger("semaphore_recipes.etcd")

#: Unary calls of one client on their way at once; more wait their turn in the loop.
MAX_CALLS_IN_FLIGHT = 64


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
        # (the same for the lease keeper's blocking client below)
        options: dict[str, Any] = dict(
            timeout=timeout,
            ca_cert=ca_cert,
            cert_key=cert_key,
            cert_cert=cert_cert,
            user=user,
            password=password,
        )
        super().__init__(endpoints, grpc.aio, **options)
        self._auth_lock = asyncio.Lock()
        self._creates: dict[str, Any] = {}  # entry id -> the call creating it, on its way
        # Calls on their way at once: thousands of waiters enqueueing together would
        # otherwise start thousands of calls in one turn of the loop and take their
        # replies in one, stalling the loop for seconds.
        self._in_flight = asyncio.Semaphore(MAX_CALLS_IN_FLIGHT)
        #: The lease keeper's connection (:mod:`.aio_lease`): keepalives off the loop.
        #: (gRPC connects a channel at its first call: a client with no lease, none.)
        self.keepalive_client = EtcdClient(endpoints, **options)

    async def execute(self, call: Call) -> Any:
        """Make ``call`` (the auth token added, refreshed once if refused); its reply."""
        if self._closed:
            raise EtcdError("the etcd client is closed")
        if self._auth.user is None:
            # no token to add or refresh: what AuthToken.call does then, without running
            # a program for it (as the sync client)
            try:
                return await self._invoke(call, ())
            except grpc.RpcError as exc:
                raise map_rpc_error(exc) from exc
        return await run_program_async(self._auth.call(call), self._send)

    async def _send(self, request: object) -> Any:
        if isinstance(request, Login):
            async with self._auth_lock:  # one login at a time; the others see its token
                return await run_program_async(self._auth.login(request.stale), self._send)
        assert isinstance(request, Send)
        return await self._invoke(request.call, request.metadata)

    async def _invoke(self, call: Call, metadata: Metadata) -> Any:
        """Make ``call`` with ``metadata``, as is; a grpc.RpcError is raised as is."""
        service, method_name = call.rpc.value
        method = getattr(self._stubs[service], method_name)
        await self._in_flight.acquire()  # (cancelled here: nothing was sent)
        try:
            rpc = method(
                call.request,
                timeout=self.timeout if call.timeout is None else call.timeout,
                metadata=metadata,
                wait_for_ready=True,
            )
        except BaseException as exc:
            self._in_flight.release()
            if isinstance(exc, grpc.aio.UsageError):  # the channel was closed
                raise EtcdError(f"the etcd client is closed: {exc}") from exc
            raise
        if call.creates is None:
            try:
                return await self._reply(rpc)  # (cancelling the awaiting task cancels the call)
            finally:
                self._in_flight.release()
        # its slot is given back when the call ends, not when its task is cancelled
        rpc.add_done_callback(lambda _: self._in_flight.release())
        return await self._not_cancelled(call.creates, rpc)

    async def _not_cancelled(self, entry: str, rpc: Any) -> Any:
        """Await ``rpc``, which may create ``entry``, without cancelling it when the
        awaiting task is cancelled: it stays known to :meth:`settled` until it ends."""
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._creates[entry] = rpc

        def ended(_: object) -> None:
            if self._creates.get(entry) is rpc:
                del self._creates[entry]
            _finish(finished)

        rpc.add_done_callback(ended)
        await finished  # a cancel of this task cancels ``finished``, not the call
        return await self._reply(rpc)  # (ended: its reply, or its AioRpcError)

    async def _reply(self, rpc: Any) -> Any:
        """``await rpc``; closing the channel cancels the calls on it, which grpc reports
        as CancelledError in the awaiting task: that is the client's close, not a cancel
        of the task, and the caller hears it as an EtcdError."""
        try:
            return await rpc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            cancelling = getattr(task, "cancelling", None)  # Python >= 3.11
            if self._closed and not (cancelling is not None and cancelling()):
                raise EtcdError("the etcd client is closed") from None
            raise

    async def settled(self, entry: str) -> None:
        """Return once the call that may create ``entry`` (:attr:`.rpc.Call.creates`)
        has ended, if one is on its way: only then may its undo be sent."""
        rpc = self._creates.get(entry)
        if rpc is None or rpc.done():
            return
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        rpc.add_done_callback(lambda _: _finish(finished))
        await finished

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

    async def close(self) -> None:
        """Close the channel and the keeper's: calls and streams in flight end."""
        if not self._closed:
            self._closed = True
            self.keepalive_client.close()
            await self._channel.close()


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
