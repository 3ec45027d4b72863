"""One Watch stream serving many watches: what to send, and whom each reply is for.

The part of the watch hub that is the same for the sync face (:mod:`.watch`, a reader
thread) and the asyncio face (:mod:`.aio_watch`, a task), without I/O: the creates to
send on a new stream (every live watch, from its next revision), the matching of the
server's ``created`` replies to the creates in the order they were sent, the watch ids,
and what each response means for its watch (events delivered, a compaction or a
permission error ending it, a server cancel re-opening the stream). A subclass sends
(:meth:`_send`), re-opens (:meth:`_reopen`) and refreshes the token
(:meth:`_refresh_token`) its own way.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING

from ._proto import etcd_api_pb2 as pb
from .errors import (
    EtcdAuthError,
    EtcdCompacted,
    EtcdError,
    error_for_cancel_reason,
    is_invalid_token,
)

if TYPE_CHECKING:
    from .watch import Watcher

__all__ = ["WatchMux"]

logger = logging.getLogger("semaphore_recipes.etcd")


class WatchMux:
    """The watches of one stream. State, under ``_lock``: ``_live`` every watch to keep
    (created or not), ``_creating`` the creates sent on the current stream and not yet
    answered (FIFO), ``_by_id`` the watches the current stream confirmed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # a callback returned
        self._live: set[Watcher] = set()
        self._creating: collections.deque[Watcher] = collections.deque()
        self._by_id: dict[int, Watcher] = {}
        self._restart = False  # we cancelled the stream to open a fresh one (auth)
        self._delivering: Watcher | None = None

    # ---- what a subclass does its own way --------------------------------------------
    def _send(self, request: pb.WatchRequest) -> None:
        """Send ``request`` on the current stream (dropped when none is open)."""
        raise NotImplementedError

    def _reopen(self, at_once: bool) -> None:
        """End the current stream; a new one is opened (at once, or after the backoff)."""
        raise NotImplementedError

    def _refresh_token(self) -> None:
        """Log in again before the next stream is opened."""
        raise NotImplementedError

    # ---- shared --------------------------------------------------------------------------
    def _new_stream(self) -> list[pb.WatchRequest]:
        """A stream is being opened (call under ``_lock``): the creates to send first."""
        self._creating.clear()
        self._by_id.clear()
        self._restart = False
        requests = []
        for watcher in self._live:
            self._creating.append(watcher)
            requests.append(watcher.create_request())
        return requests

    def _stream_ended(self) -> None:
        """The current stream is over (call under ``_lock``)."""
        for watcher in self._live:
            watcher.reconnects += 1

    def _added(self, watcher: Watcher, streaming: bool) -> None:
        """``watcher`` is to be kept (call under ``_lock``); its create is sent now when
        a stream is open, else with the next stream's."""
        self._live.add(watcher)
        if streaming:
            self._creating.append(watcher)
            self._send(watcher.create_request())

    def _removed(self, watcher: Watcher) -> None:
        """Stop ``watcher`` (call under ``_lock``); a create still unanswered is
        cancelled when its reply comes."""
        watcher.stopped()
        self._live.discard(watcher)
        watch_id = watcher.watch_id
        if watch_id is not None and self._by_id.get(watch_id) is watcher:
            del self._by_id[watch_id]
            self._send_cancel(watch_id)

    def _send_cancel(self, watch_id: int) -> None:
        self._send(pb.WatchRequest(cancel_request=pb.WatchCancelRequest(watch_id=watch_id)))

    def _stream_failed(self, err: EtcdError) -> None:
        """The whole stream broke: log it; with an auth error, authenticate again once,
        or end the watches waiting for their create (their permission is what failed)."""
        logger.info("etcd: watch stream broke (%s); creating its watches again", err)
        if not isinstance(err, EtcdAuthError):
            return
        with self._lock:
            waiting = list(self._creating)
        if not waiting:
            return
        if all(w.auth_retried for w in waiting) or not is_invalid_token(err):
            for watcher in waiting:
                self._end(watcher, err)
            return
        for watcher in waiting:
            watcher.auth_retried = True
        self._refresh_token()

    def _dispatch(self, resp: pb.WatchResponse) -> bool:
        """Handle one response; True when it confirmed a watch (the stream works)."""
        watch_id = int(resp.watch_id)
        confirmed = False
        with self._lock:
            if resp.created:
                watcher = self._creating.popleft() if self._creating else None
                if watcher is None:
                    return False  # cannot happen: the server answers every create
                if not resp.canceled:
                    confirmed = True
                    if watcher.ended:
                        self._send_cancel(watch_id)
                        return True
                    self._by_id[watch_id] = watcher
                    watcher.watch_id = watch_id
            elif resp.canceled or resp.compact_revision:
                watcher = self._by_id.pop(watch_id, None)
            else:
                watcher = self._by_id.get(watch_id)
            if watcher is None or watcher.ended:
                return confirmed
            self._delivering = watcher
        try:
            self._handle(watcher, resp)
        finally:
            with self._lock:
                self._delivering = None
                self._idle.notify_all()
        return confirmed

    def _handle(self, watcher: Watcher, resp: pb.WatchResponse) -> None:
        if resp.compact_revision:
            self._end(
                watcher,
                EtcdCompacted(
                    f"watch start revision {watcher.next_revision} compacted "
                    f"(oldest kept: {resp.compact_revision})",
                    compact_revision=int(resp.compact_revision),
                ),
            )
            return
        if resp.canceled:
            reason = resp.cancel_reason or "canceled by the server"
            err = error_for_cancel_reason(reason)
            if isinstance(err, EtcdAuthError) and (
                watcher.auth_retried or not is_invalid_token(err)
            ):
                self._end(watcher, err)
                return
            logger.info("etcd: watch on %r canceled by the server: %s", watcher.key, reason)
            if isinstance(err, EtcdAuthError):
                watcher.auth_retried = True
                self._refresh_token()
            # a new stream creates its watches again, this one included: at once with a
            # fresh token, else after the usual backoff
            self._reopen(at_once=isinstance(err, EtcdAuthError))
            return
        if resp.created:
            if not watcher.created.is_set():
                logger.debug("etcd: watch on %r created", watcher.key)
            watcher.confirmed(int(resp.header.revision))
        events = list(resp.events)
        if events:
            watcher.deliver(events, int(resp.header.revision))
        elif not resp.created:
            watcher.progressed(int(resp.header.revision))

    def _end(self, watcher: Watcher, err: Exception) -> None:
        with self._lock:
            self._live.discard(watcher)
        watcher.fail(err)
