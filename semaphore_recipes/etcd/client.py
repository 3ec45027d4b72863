"""The etcd client: one gRPC channel, its auth token, and the unary calls the recipe makes.

It talks to etcd through the project's own generated stubs
(:mod:`semaphore_recipes.etcd._proto`), so every request field the recipe needs reaches
the server as written. The rest of the layer, one concept per module:

* :mod:`.rpc`: a call as a value (:class:`~.rpc.Call`), what the backend's programs
  yield; :meth:`EtcdClient.execute` makes one (the asyncio face's twin is
  :mod:`.aio_client`, over ``grpc.aio``);
* :mod:`.auth`: the auth token, written once for both clients;
* :mod:`.ops`: request builders (one range builder for every range), transaction
  guards (:class:`~.ops.Compare`) and operations (:class:`~.ops.Op`);
* :mod:`.errors`: the :class:`~.errors.EtcdError` tree every call raises instead of
  :class:`grpc.RpcError` (the original error is kept as ``__cause__``);
* :mod:`.retry`: :func:`~.retry.retry_unavailable`, the one retry on UNAVAILABLE;
* :mod:`.lease`: :class:`~.lease.LeaseKeeper`, a lease's keepalive threads (the
  asyncio face's, reporting to its loop: :mod:`.aio_lease`; their decisions:
  :mod:`.lease_health`);
* :mod:`.watch`: every watch of a client on one stream, resumed after connection loss
  (read by a task: :mod:`.aio_watch`; what both share: :mod:`.watch_mux`);
* :mod:`.runner`: the backend's programs run blocking or awaited;
* :mod:`.channel`: endpoints to a gRPC target, credentials and options.

Connection loss, in general: a unary call that cannot reach a healthy member raises
:class:`EtcdUnavailable`, meaning the request *may or may not* have been applied; nothing
is retried behind the caller's back (see :func:`~.retry.retry_unavailable` for an
explicit, opt-in retry). With several endpoints the channel fails over to the next member
by itself, but a call in flight when its member dies fails with :class:`EtcdUnavailable`
(and a write forwarded to a leader that just died is lost inside etcd and only fails when
its deadline expires: keep write deadlines short where failover speed matters). Streams
(keepalive, watch) reconnect by themselves with a small backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import grpc

from .._core.program import run_program
from ._proto import etcd_api_pb2 as pb
from .auth import REQUIRE_LEADER, Login, Metadata, Send
from .client_base import ClientBase
from .errors import EtcdError, map_rpc_error
from .ops import Key
from .rpc import Call, granted_lease

__all__ = ["EtcdClient"]

logger = logging.getLogger("semaphore_recipes.etcd")


class EtcdClient(ClientBase):
    """A connection to an etcd v3 cluster: one gRPC channel, typed unary calls.

    ``endpoints`` are ``host:port`` strings; several give failover (see
    :func:`~.channel.channel_config`). ``timeout`` is the default deadline of each unary
    call, in seconds; every call also takes ``timeout=`` to override it.

    With ``user``/``password`` the client authenticates on first use and sends the token
    with every call; when the server says the token is invalid (expired, or the server
    restarted) it authenticates again once and repeats the call.

    Calls wait for the channel to (re)connect until their deadline (gRPC
    ``wait_for_ready``, like etcd's Go client), so a member restart or a failover shorter
    than the timeout is absorbed. A call whose connection breaks while it is in flight, or
    that reaches its deadline, raises :class:`EtcdUnavailable` (the request may or may
    not have been applied); the channel keeps reconnecting in the background (backoff
    0.1-2 s), so a later call can succeed without re-creating the client. When the leader
    crashes, a write that a follower had already forwarded to it is dropped by etcd and
    only fails at its deadline (measured: the full ``timeout``), while the election itself
    takes about 1-1.5 election timeouts; so retry-safe writes with a short ``timeout=``
    fail over fastest. A member cut off from its leader keeps this channel (gRPC only
    moves on when the connection breaks); its linearizable calls time out. Thread-safe.
    """

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
            grpc,
            timeout=timeout,
            ca_cert=ca_cert,
            cert_key=cert_key,
            cert_cert=cert_cert,
            user=user,
            password=password,
        )
        self._watch: Any = self._stubs["Watch"]
        self._lease: Any = self._stubs["Lease"]
        self._auth_lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing

    @property
    def channel(self) -> Any:
        """The underlying ``grpc.Channel``, for the test harness's calls of RPCs the
        library never makes (etcd's Auth administration, the list of leases)."""
        return self._channel

    def execute(self, call: Call) -> Any:
        """Make ``call`` (the auth token added, refreshed once if refused); its reply.
        Every error is an :class:`~.errors.EtcdError` (see the class docstring)."""
        if self._closed:
            raise EtcdError("the etcd client is closed")
        if self._auth.user is None:
            # no token to add or refresh: what AuthToken.call does then, without running
            # a program for it (every call of an anonymous client: 3 us less)
            try:
                return self._invoke(call, ())
            except grpc.RpcError as exc:
                raise map_rpc_error(exc) from exc
        return run_program(self._auth.call(call), self._send)

    def _send(self, request: object) -> Any:
        """Answer the auth programs' requests (:mod:`.auth`): raw calls and logins."""
        if isinstance(request, Login):
            with self._auth_lock:  # one login at a time; the others see its token
                return run_program(self._auth.login(request.stale), self._send)
        assert isinstance(request, Send)
        return self._invoke(request.call, request.metadata)

    def _invoke(self, call: Call, metadata: Metadata) -> Any:
        """Make ``call`` with ``metadata``, as is; a grpc.RpcError is raised as is."""
        service, method_name = call.rpc.value
        method = getattr(self._stubs[service], method_name)
        try:
            return method(
                call.request,
                timeout=self.timeout if call.timeout is None else call.timeout,
                metadata=metadata,
                wait_for_ready=True,
            )
        except ValueError as exc:  # "Cannot invoke RPC on closed channel!"
            if self._closed:
                raise EtcdError("the etcd client is closed") from exc
            raise

    def metadata(self, *extra: tuple[str, str]) -> Metadata:
        """The call metadata: the auth token (authenticating first if needed) and ``extra``."""
        if self._closed:
            raise EtcdError("the etcd client is closed")
        return run_program(self._auth.metadata(*extra), self._send)

    def reauthenticate(self) -> None:
        """Authenticate again now: a stream (keepalive, watch) was refused its token.
        A failure is logged, not raised; the stream's next attempt reports it."""
        try:
            run_program(self._auth.refresh(self.metadata()), self._send)
        except EtcdError as exc:
            logger.info("etcd: authentication failed: %s", exc)

    # ------------------------------------------------------------------ KV

    def range(
        self,
        key: Key,
        range_end: Key = b"",
        *,
        keys_only: bool = False,
        max_create_revision: int = 0,
        timeout: float | None = None,
    ) -> pb.RangeResponse:
        """Read ``key``, or the keys in ``[key, range_end)`` in key order (see
        :func:`~.ops.range_request` for the options).

        Raises :class:`EtcdUnavailable` on connection loss (safe to retry).
        """
        resp: pb.RangeResponse = self.execute(
            Call.range(
                key,
                range_end,
                keys_only=keys_only,
                max_create_revision=max_create_revision,
                timeout=timeout,
            )
        )
        return resp

    def put(
        self, key: Key, value: Key, *, lease: int = 0, timeout: float | None = None
    ) -> pb.PutResponse:
        """Write ``key``; with ``lease`` the key is deleted when the lease ends.

        Raises :class:`EtcdLeaseNotFound` if the lease is gone, :class:`EtcdUnavailable`
        on connection loss (the put may have been applied).
        """
        resp: pb.PutResponse = self.execute(Call.put(key, value, lease=lease, timeout=timeout))
        return resp

    def delete_range(
        self, key: Key, range_end: Key = b"", *, timeout: float | None = None
    ) -> pb.DeleteRangeResponse:
        """Delete ``key`` or ``[key, range_end)``; ``deleted`` counts the keys removed.

        Raises :class:`EtcdUnavailable` on connection loss (may have been applied).
        """
        resp: pb.DeleteRangeResponse = self.execute(
            Call.delete_range(key, range_end, timeout=timeout)
        )
        return resp

    def txn(
        self,
        compare: Sequence[pb.Compare],
        success: Sequence[pb.RequestOp] = (),
        failure: Sequence[pb.RequestOp] = (),
        *,
        timeout: float | None = None,
    ) -> pb.TxnResponse:
        """Run ``success`` if every guard in ``compare`` holds, else ``failure``, atomically.

        ``responses`` holds one :class:`ResponseOp` per op of the branch that ran. Ops in
        a branch see the effects of earlier ops of the same branch (a range after a put
        returns the new key with its create_revision). Raises :class:`EtcdUnavailable`
        on connection loss (the txn may have been applied: make it retry-safe).
        """
        resp: pb.TxnResponse = self.execute(Call.txn(compare, success, failure, timeout=timeout))
        return resp

    # ------------------------------------------------------------------ leases

    def lease_grant(self, ttl: int, *, timeout: float | None = None) -> tuple[int, int]:
        """Grant a lease of ``ttl`` seconds; return ``(lease_id, granted_ttl)``.

        The server may grant a longer TTL than asked (its minimum depends on the election
        timeout). Raises :class:`EtcdUnavailable` on connection loss (a lease may have
        been granted anyway; it expires by itself after its TTL).
        """
        return granted_lease(self.execute(Call.lease_grant(ttl, timeout=timeout)))

    def lease_revoke(self, lease_id: int, *, timeout: float | None = None) -> None:
        """Revoke a lease; every key attached to it is deleted in the same revision.

        Raises :class:`EtcdLeaseNotFound` if it is already gone.
        """
        self.execute(Call.lease_revoke(lease_id, timeout=timeout))

    def lease_time_to_live(
        self, lease_id: int, *, timeout: float | None = None
    ) -> pb.LeaseTimeToLiveResponse:
        """Remaining ``TTL`` of a lease (-1 when it does not exist) and ``grantedTTL``.
        The library never asks; the fault campaign's checker does (``chaos/``)."""
        resp: pb.LeaseTimeToLiveResponse = self.execute(
            Call.lease_time_to_live(lease_id, timeout=timeout)
        )
        return resp

    # ------------------------------------------------------------------ streams

    def open_watch_stream(self, requests: Iterator[pb.WatchRequest]) -> Any:
        """Open a raw Watch stream; returns the response iterator. (Prefer
        :class:`semaphore_recipes.etcd.watch.Watcher`: one stream serves every watch.)"""
        try:
            return self._watch.Watch(
                requests,
                metadata=self.metadata(REQUIRE_LEADER),
                wait_for_ready=True,
            )
        except ValueError as exc:  # grpc: "Cannot invoke RPC: Channel closed!"
            raise EtcdError(f"client closed: {exc}") from exc

    def open_keepalive_stream(self, requests: Iterator[pb.LeaseKeepAliveRequest]) -> Any:
        """Open a raw LeaseKeepAlive stream (prefer :class:`~.lease.LeaseKeeper`)."""
        try:
            return self._lease.LeaseKeepAlive(
                requests,
                metadata=self.metadata(REQUIRE_LEADER),
                wait_for_ready=True,
            )
        except ValueError as exc:  # grpc: "Cannot invoke RPC: Channel closed!"
            raise EtcdError(f"client closed: {exc}") from exc

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the channel. Calls in flight fail; watchers and keepers using it stop."""
        if not self._closed:
            self._closed = True
            self._channel.close()

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
