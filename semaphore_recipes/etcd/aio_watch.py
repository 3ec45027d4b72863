"""Every watch of one :class:`~.aio_client.AioEtcdClient` on one Watch stream, read by a
task of the event loop (the asyncio face's twin of :mod:`.watch`'s reader thread).

:class:`~.watch.Watcher` is the same object on both faces: made over an
``AioEtcdClient`` it is served by this hub. What to send and whom each reply is for is
:class:`~.watch_mux.WatchMux`'s, shared with the sync hub; here is only the I/O: one
task per client, started by the first watch and ended when none is left.

Connection loss (or a member losing its leader, or any stream error): the stream is
opened again with a backoff from 50 ms to 1 s and every live watch is created again
from its last delivered revision + 1, so events that happened meanwhile are delivered,
each exactly once. Callbacks run in the event loop, one at a time: keep them short.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from ._proto import etcd_api_pb2 as pb
from .aio_client import AioEtcdClient
from .errors import EtcdError, map_rpc_error
from .retry import Backoff
from .watch_mux import WatchMux

if TYPE_CHECKING:
    from .watch import Watcher

__all__ = ["AsyncWatchHub", "hub_of"]

logger = logging.getLogger("semaphore_recipes.etcd")

_END = object()  # ends a stream's request iterator

_hubs: weakref.WeakKeyDictionary[AioEtcdClient, AsyncWatchHub] = weakref.WeakKeyDictionary()


def hub_of(client: AioEtcdClient) -> AsyncWatchHub:
    """The hub of ``client`` (called in its event loop)."""
    hub = _hubs.get(client)
    if hub is None:
        hub = _hubs[client] = AsyncWatchHub(client)
    return hub


class AsyncWatchHub(WatchMux):
    """The one Watch stream of an aio client, read by a task."""

    def __init__(self, client: AioEtcdClient) -> None:
        super().__init__()
        self._client = weakref.ref(client)
        self._outbox: asyncio.Queue[Any] | None = None  # None: no stream open now
        self._task: asyncio.Task[None] | None = None
        self._stream_task: asyncio.Task[None] | None = None
        self._login = False  # log in again before the next stream

    def add(self, watcher: Watcher) -> None:
        with self._lock:
            self._added(watcher, streaming=self._outbox is not None)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    def remove(self, watcher: Watcher, timeout: float | None) -> None:
        """Stop ``watcher``; no callback of it starts after this (they run in this loop,
        so none is running now unless this is called from it)."""
        with self._lock:
            self._removed(watcher)

    def _send(self, request: pb.WatchRequest) -> None:
        if self._outbox is not None:
            self._outbox.put_nowait(request)

    def _reopen(self, at_once: bool) -> None:
        self._restart = at_once
        if self._stream_task is not None:
            self._stream_task.cancel()

    def _refresh_token(self) -> None:
        self._login = True

    async def _run(self) -> None:
        backoff = Backoff(0.05, 1.0)
        while True:
            client = self._client()
            with self._lock:
                if client is None or client.closed or not self._live:
                    self._task = None  # add() starts a new one when needed
                    return
                outbox: asyncio.Queue[Any] = asyncio.Queue()
                for request in self._new_stream():
                    outbox.put_nowait(request)
                self._outbox = outbox
            if self._login:
                self._login = False
                await client.reauthenticate()
            stream = asyncio.ensure_future(self._stream(client, outbox, backoff))
            self._stream_task = stream
            del client  # no strong reference while the stream is open
            try:
                # (wait, not await: a re-open cancels the stream task, not this one)
                await asyncio.wait({stream})
            except asyncio.CancelledError:
                stream.cancel()
                raise
            finally:
                self._stream_task = None
                outbox.put_nowait(_END)
                with self._lock:
                    self._outbox = None
                    self._stream_ended()
            if not self._restart:
                await asyncio.sleep(backoff.next())

    async def _stream(
        self, client: AioEtcdClient, outbox: asyncio.Queue[Any], backoff: Backoff
    ) -> None:
        try:
            call = await client.open_watch_stream(_requests(outbox))
            try:
                async for response in call:
                    if self._dispatch(response):
                        backoff.reset()
            finally:
                call.cancel()
        except grpc.RpcError as exc:
            if not self._restart and not client.closed:
                self._stream_failed(map_rpc_error(exc))
        except EtcdError as exc:  # could not open the stream (client closed, login failed)
            logger.info("etcd: cannot open the watch stream: %s", exc)


async def _requests(outbox: asyncio.Queue[Any]) -> AsyncIterator[pb.WatchRequest]:
    while (request := await outbox.get()) is not _END:
        yield request
