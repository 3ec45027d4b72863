"""Keeping one lease alive from a background thread, and saying when that fails."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

from ._proto import etcd_api_pb2 as pb
from .errors import EtcdAuthError, EtcdError, EtcdLeaseNotFound, is_invalid_token, map_rpc_error
from .lease_health import KeeperBase
from .retry import Backoff

if TYPE_CHECKING:
    from .client import EtcdClient

__all__ = ["LeaseKeeper"]

logger = logging.getLogger("semaphore_recipes.etcd")


class LeaseKeeper(KeeperBase):
    """Keep a lease alive from a background daemon thread.

    Sends a LeaseKeepAlive on one bidirectional stream every ``interval`` seconds
    (default ``ttl / 3``) and records when the server last acknowledged one
    (:attr:`last_ack`, ``time.monotonic()``).

    * No acknowledgement for ``suspend_after`` seconds (default ``2/3 * ttl``):
      ``on_suspended()`` is called, once per episode, and the stream is re-opened.
      The lease may still be alive; treat what it protects as unsafe. A watchdog
      thread of its own checks this, so it holds however the stream is stuck (a
      connection reset while the stream waits for the channel to be ready, a black
      hole, a server that stopped answering).
    * Acknowledgements come back after a suspension: ``on_restored()``.
    * The server answers TTL <= 0 or "lease not found": ``on_expired()`` is called once
      and the thread ends. Connection loss alone never counts as expiry (a new etcd
      leader renews every lease), so a keeper cut off for good stays suspended.

    ``wanted``, when given, is asked before each keepalive and at each watchdog turn:
    once it says False (the asyncio face: its event loop is closed) the keeper stops by
    itself, reporting nothing, and the lease is left to expire.

    Stream errors are logged and the stream is re-opened with a backoff from 50 ms up
    to ``ttl / 6``. The decisions are :class:`~.lease_health.LeaseHealth`'s (shared
    with the asyncio face's keeper, :mod:`.aio_lease`, this class reporting to a loop).
    Callbacks run on the keeper's threads, one at a time; exceptions they raise are
    logged. :meth:`stop` ends the
    threads (it does not revoke the lease).
    """

    def __init__(
        self,
        client: EtcdClient,
        lease_id: int,
        ttl: float,
        *,
        on_expired: Callable[[], None],
        on_suspended: Callable[[], None],
        on_restored: Callable[[], None],
        interval: float | None = None,
        suspend_after: float | None = None,
        wanted: Callable[[], bool] | None = None,
        start: bool = True,
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
        self._wanted = wanted
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._call: Any = None
        self._opened = time.monotonic()  # when the current stream was opened
        self._stale = False  # set by the watchdog when it cancels a silent stream
        self._thread = threading.Thread(
            target=self._run, name=f"etcd-lease-keeper-{lease_id:x}", daemon=True
        )
        self._watchdog = threading.Thread(
            target=self._watch_acks, name=f"etcd-lease-watchdog-{lease_id:x}", daemon=True
        )
        if start:
            self.start()

    # -------------------------------------------------------------- public state

    @property
    def running(self) -> bool:
        """True while the keeper's thread runs."""
        return self._thread.is_alive()

    def start(self) -> None:
        """Start the threads (done by the constructor unless ``start=False``)."""
        self.health.started()
        self._opened = time.monotonic()
        self._thread.start()
        self._watchdog.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop sending keepalives and join the threads (the lease is left to expire)."""
        self.health.stopped = True
        self._stop.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()
        for thread in (self._thread, self._watchdog):
            if thread.is_alive() and threading.current_thread() is not thread:
                thread.join(timeout)

    # -------------------------------------------------------------- internals

    def _watch_acks(self) -> None:
        """The watchdog: reports the suspension when acknowledgements are overdue and
        cancels the silent stream so that ``_run`` opens a fresh one. It never reads the
        stream: a stream blocked waiting for a connection cannot hold it up."""
        cancelled: Any = None
        while not self._stop.is_set() and not self.client.closed and self._still_wanted():
            with self._lock:
                call, opened = self._call, self._opened
            recycle, pause = self.health.watchdog_turn(opened)
            if recycle and call is not None and call is not cancelled:
                self._stale = True
                call.cancel()
                cancelled = call
            self._stop.wait(pause)

    def _still_wanted(self) -> bool:
        """False once ``wanted`` says so; the keeper is then stopped."""
        if self._wanted is None or self._wanted():
            return True
        logger.info("etcd: lease %x: no longer wanted, keepalives stop", self.lease_id)
        self.stop(timeout=0)
        return False

    def _requests(self, done: threading.Event) -> Iterator[pb.LeaseKeepAliveRequest]:
        """Runs on gRPC's request thread: one keepalive now, then every interval."""
        req = pb.LeaseKeepAliveRequest(ID=self.lease_id)
        while not done.is_set() and not self._stop.is_set() and self._still_wanted():
            yield req
            done.wait(self.interval)

    def _run(self) -> None:
        backoff = Backoff(0.05, max(0.05, self.ttl / 6.0))
        while not self._stop.is_set() and not self.client.closed:
            done = threading.Event()
            self._stale = False
            try:
                call = self.client.open_keepalive_stream(self._requests(done))
                with self._lock:
                    self._call, self._opened = call, time.monotonic()
                if self._stop.is_set():
                    call.cancel()
                for resp in call:
                    if not self.health.acknowledged(resp.TTL):
                        self._stop.set()  # the watchdog too: a lease gone is not "suspended"
                        return
                    backoff.reset()
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    return
                err = map_rpc_error(exc)
                if isinstance(err, EtcdLeaseNotFound):
                    self._stop.set()
                    self.health.expire(str(err))
                    return
                if self._stale:
                    logger.debug(
                        "etcd: lease %x: re-opening a silent keepalive stream", self.lease_id
                    )
                else:
                    logger.info("etcd: lease %x: keepalive stream failed: %s", self.lease_id, err)
                if isinstance(err, EtcdAuthError) and is_invalid_token(exc):
                    self.client.reauthenticate()
            except EtcdError as exc:  # closed client, or authentication failed
                if self._stop.is_set() or self.client.closed:
                    return
                logger.info("etcd: lease %x: cannot open keepalive stream: %s", self.lease_id, exc)
            finally:
                done.set()
                with self._lock:
                    self._call = None
            self.health.check()
            if self._stale:
                continue  # re-open at once; the server may just have been slow
            self._stop.wait(backoff.next())
            self.health.check()
