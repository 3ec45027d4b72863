"""Watches of one :class:`EtcdClient`, multiplexed on one gRPC Watch stream.

etcd serves any number of watches on one stream, told apart by the watch id the server
assigns in its ``created`` reply. The server answers create requests in the order it
got them (etcd's Go client relies on the same), so creates can be pipelined and matched
first-in first-out, which works with every etcd 3.x. One stream and one reader thread
per client, however many watches: a waiter that arms ten holders opens no stream, it
sends ten small requests on the open one (a stream and a thread per watch are slow to
set up, on the path of every new head of the queue: docs/design.md section 7).

Connection loss (or a member losing its leader, or any stream error): the stream is
opened again with a backoff from 50 ms to 1 s and every live watch is created again
from its last delivered revision + 1, so events that happened meanwhile are delivered,
each exactly once. A watch whose history was compacted gets ``on_error(EtcdCompacted)``
and stops (the caller re-reads and watches again); a permission error stops it the same
way. Callbacks of every watch of the client run on the one reader thread, in order: keep
them short (a slow one delays the events of the others, loses none).
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from ._proto import etcd_api_pb2 as pb
from .callbacks import run_callback
from .client import EtcdClient
from .errors import EtcdError, map_rpc_error
from .ops import Key, to_bytes
from .retry import Backoff
from .watch_mux import WatchMux

if TYPE_CHECKING:
    from .aio_client import AioEtcdClient
    from .aio_watch import AsyncWatchHub

__all__ = ["Event", "Watcher"]

#: The message type of the events ``on_events`` gets (for annotations).
Event = pb.Event

logger = logging.getLogger("semaphore_recipes.etcd")

_END = object()  # ends a stream's request iterator


class Watcher:
    """Watch ``key`` (or ``[key, range_end)``) on the client's shared watch stream.

    ``on_events(events, revision)`` gets the events of each WatchResponse (in revision
    order) and the response's header revision. ``start_revision`` is the first revision
    delivered (0: from "now", i.e. after the revision current when the server confirms
    the watch). :attr:`created` is set once the server confirmed the watch. See the
    module docstring for connection loss, compaction and errors. :meth:`cancel` stops
    it: no callback starts after it returns.
    """

    def __init__(
        self,
        client: EtcdClient | AioEtcdClient,
        key: Key,
        range_end: Key = b"",
        *,
        start_revision: int,
        prev_kv: bool = False,
        on_events: Callable[[list[Event], int], None],
        on_error: Callable[[Exception], None] | None = None,
        start: bool = True,
    ) -> None:
        self.client = client
        self.key = to_bytes(key)
        self.range_end = to_bytes(range_end)
        self.prev_kv = prev_kv
        self._on_events = on_events
        self._on_error = on_error
        self._next_revision = start_revision
        self.created = threading.Event()
        #: the server's revision when it confirmed the watch (its first ``created`` reply)
        self.created_revision: int | None = None
        self._when_created: list[Callable[[], None]] = []
        self._created_lock = threading.Lock()
        self.reconnects = 0  #: times the watch was created again after its stream broke
        self._ended = False
        self._started = False
        self._error: Exception | None = None
        # The stream's reader (WatchMux) keeps these two, under its lock:
        #: the server's id for this watch on the current stream (None: not confirmed)
        self.watch_id: int | None = None
        #: a permission refusal led to a fresh token once (tried again only after a
        #: create succeeds)
        self.auth_retried = False
        self._hub = _hub_of(client)
        if start:
            self.start()

    @property
    def next_revision(self) -> int:
        """The revision the watch would resume from (0 until known when started at "now")."""
        return self._next_revision

    @property
    def ended(self) -> bool:
        """Cancelled or failed: no callback of it starts any more."""
        return self._ended

    @property
    def error(self) -> Exception | None:
        """The error that ended the watch, if any."""
        return self._error

    @property
    def running(self) -> bool:
        """True from :meth:`start` until cancelled, failed, or the client closed."""
        return self._started and not self._ended and not self.client.closed

    def start(self) -> None:
        """Send the create request (done by the constructor unless ``start=False``)."""
        self._started = True
        self._hub.add(self)

    def when_created(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the server has confirmed the watch: now if it has, else
        on the thread (or event loop) that reads the stream. Never called for a watch
        that ends before it is confirmed."""
        with self._created_lock:
            if self.created_revision is None:
                self._when_created.append(callback)
                return
        callback()

    # ---- called by the stream's reader (:class:`~.watch_mux.WatchMux`) ----------------
    def create_request(self) -> pb.WatchRequest:
        """The create to send on a stream: from the next revision to deliver."""
        return pb.WatchRequest(
            create_request=pb.WatchCreateRequest(
                key=self.key,
                range_end=self.range_end,
                start_revision=self._next_revision,
                prev_kv=self.prev_kv,
            )
        )

    def stopped(self) -> None:
        """Cancelled: no callback starts from now on."""
        self._ended = True

    def confirmed(self, revision: int) -> None:
        """The server confirmed the watch at ``revision`` (a ``created`` reply, at each
        stream): a watch from "now" delivers what comes after it; the first one is
        :attr:`created_revision`."""
        if self._next_revision == 0:
            self._next_revision = revision + 1
        self.auth_retried = False
        with self._created_lock:
            if self.created_revision is not None:
                return  # created again on a new stream
            self.created_revision = revision
            callbacks, self._when_created = self._when_created, []
        self.created.set()
        for callback in callbacks:
            run_callback("when_created", callback)

    def cancel(self, timeout: float | None = 5.0) -> None:
        """Stop watching. Unless called from a callback, waits (at most ``timeout``) for
        a callback of this watch that is running to return."""
        self._hub.remove(self, timeout)

    def deliver(self, events: list[Event], revision: int) -> None:
        """Hand ``events`` (of a response at header ``revision``) to ``on_events``; a
        new stream resumes after the last of them."""
        self._next_revision = int(events[-1].kv.mod_revision) + 1
        run_callback("on_events", self._on_events, events, revision)

    def progressed(self, revision: int) -> None:
        """A progress notification at ``revision``: nothing is left to deliver up to it."""
        if self.created.is_set() and revision >= self._next_revision:
            self._next_revision = revision + 1

    def fail(self, err: Exception) -> None:
        """The watch ends with ``err`` (compacted, refused), told to ``on_error``."""
        self._error = err
        self._ended = True
        logger.warning("etcd: watch on %r stopped: %s", self.key, err)
        run_callback("on_error", self._on_error, err)


_hubs: weakref.WeakKeyDictionary[EtcdClient, _WatchHub] = weakref.WeakKeyDictionary()
_hubs_lock = threading.Lock()


def _hub_of(client: EtcdClient | AioEtcdClient) -> _WatchHub | AsyncWatchHub:
    """The one hub (stream) of ``client``: a reader thread, or a task of the loop."""
    from .aio_client import AioEtcdClient

    if isinstance(client, AioEtcdClient):
        from .aio_watch import hub_of

        return hub_of(client)
    with _hubs_lock:
        hub = _hubs.get(client)
        if hub is None:
            hub = _hubs[client] = _WatchHub(client)
        return hub


class _WatchHub(WatchMux):
    """The one Watch stream of a client, on a reader thread: sends creates and cancels,
    reads and dispatches (:class:`~.watch_mux.WatchMux`). ``_outbox`` feeds the current
    stream."""

    def __init__(self, client: EtcdClient) -> None:
        super().__init__()
        self._client = weakref.ref(client)
        self._outbox: queue.SimpleQueue[Any] | None = None  # None: no stream open now
        self._call: Any = None
        self._thread: threading.Thread | None = None
        self._pause = threading.Event()  # never set: the backoff sleeps on it

    # ---- from any thread ------------------------------------------------------------
    def add(self, watcher: Watcher) -> None:
        with self._lock:
            self._added(watcher, streaming=self._outbox is not None)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="etcd-watch-stream", daemon=True
                )
                self._thread.start()

    def remove(self, watcher: Watcher, timeout: float | None) -> None:
        with self._lock:
            self._removed(watcher)
            if threading.current_thread() is not self._thread:
                self._idle.wait_for(lambda: self._delivering is not watcher, timeout)

    # ---- the reader thread ----------------------------------------------------------
    def _run(self) -> None:
        backoff = Backoff(0.05, 1.0)
        while True:
            client = self._client()
            with self._lock:
                if client is None or client.closed or not self._live:
                    self._thread = None  # add() starts a new one when needed
                    return
                outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
                for request in self._new_stream():
                    outbox.put(request)
                self._outbox = outbox
            try:
                call = client.open_watch_stream(iter(outbox.get, _END))
                with self._lock:
                    self._call = call
                del client  # no strong reference while blocked on the stream
                for resp in call:
                    if self._dispatch(resp):
                        backoff.reset()
            except grpc.RpcError as exc:
                closed = (client := self._client()) is None or client.closed
                if not self._restart and not closed:
                    self._stream_failed(map_rpc_error(exc))
                del client
            except EtcdError as exc:  # could not open the stream (client closed)
                logger.info("etcd: cannot open the watch stream: %s", exc)
            finally:
                outbox.put(_END)
                with self._lock:
                    self._outbox = self._call = None
                    self._stream_ended()
            if not self._restart:
                self._pause.wait(backoff.next())

    def _send(self, request: pb.WatchRequest) -> None:
        if self._outbox is not None:
            self._outbox.put(request)

    def _reopen(self, at_once: bool) -> None:
        """End the current stream; the reader opens a new one."""
        with self._lock:
            self._restart = at_once
            call = self._call
        if call is not None:
            call.cancel()

    def _refresh_token(self) -> None:
        client = self._client()
        if client is not None:
            client.reauthenticate()
