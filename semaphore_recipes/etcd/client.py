"""A thin, typed, synchronous layer over etcd's v3 gRPC API.

This module talks to etcd through the project's own generated stubs
(:mod:`semaphore_recipes.etcd._proto`), so every request field that the semaphore
recipe needs (``limit``, ``sort_order``/``sort_target``, ``count_only``, ``keys_only``,
``max_create_revision``, ...) reaches the server as written.

What it offers:

* :class:`EtcdClient`: one gRPC channel to one or several endpoints, unary KV/Lease calls
  that return the protobuf responses, and builders for transactions (:class:`Compare`,
  :class:`Op`).
* :class:`LeaseKeeper`: a background thread that keeps a lease alive and reports
  suspension, restoration and expiry.
* Watches are in :mod:`semaphore_recipes.etcd.watch`: all of a client's watches share
  one stream, and survive connection loss by re-creating each watch from its last seen
  revision + 1.
* A small error tree (:class:`EtcdError` and subclasses) that every call raises instead of
  :class:`grpc.RpcError`; the original error is kept as ``__cause__``.

Connection loss, in general: a unary call that cannot reach a healthy member raises
:class:`EtcdUnavailable`, meaning the request *may or may not* have been applied; nothing
is retried behind the caller's back (see :func:`retry_unavailable` for an explicit,
opt-in retry). With several endpoints the channel fails over to the next member by
itself, but a call in flight when its member dies fails with :class:`EtcdUnavailable`
(and a write forwarded to a leader that just died is lost inside etcd and only fails when
its deadline expires: keep write deadlines short where failover speed matters). Streams
(keepalive, watch) reconnect by themselves with a small backoff.

The request builders (:func:`range_request`, ...), :func:`channel_config` and
:func:`map_rpc_error` do no I/O, so an asyncio face can reuse them with
``grpc.aio`` channels and the same stubs.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TypeVar

import grpc

from semaphore_recipes.etcd._proto import etcd_api_pb2 as pb
from semaphore_recipes.etcd._proto import etcd_api_pb2_grpc as _rpc_module

__all__ = [
    "ChannelConfig",
    "Compare",
    "CompareOp",
    "EtcdAuthError",
    "EtcdClient",
    "EtcdCompacted",
    "EtcdError",
    "EtcdLeaseNotFound",
    "EtcdUnavailable",
    "Event",
    "Key",
    "KeyValue",
    "LeaseKeeper",
    "Op",
    "SortOrder",
    "SortTarget",
    "WatchFilter",
    "channel_config",
    "delete_request",
    "map_rpc_error",
    "prefix_range_end",
    "put_request",
    "range_request",
    "retry_unavailable",
]

logger = logging.getLogger("semaphore_recipes.etcd")

# The generated *_pb2_grpc module has no type information; use it through Any.
_rpc: Any = _rpc_module

#: The protobuf message types callers see (re-exported for annotations).
Event = pb.Event
KeyValue = pb.KeyValue

Key = bytes | str
SortOrder = Literal["none", "ascend", "descend"]
SortTarget = Literal["key", "version", "create", "mod", "value"]
CompareOp = Literal["==", "!=", "<", ">"]
WatchFilter = Literal["noput", "nodelete"]

_SORT_ORDER = {
    "none": pb.RangeRequest.NONE,
    "ascend": pb.RangeRequest.ASCEND,
    "descend": pb.RangeRequest.DESCEND,
}
_SORT_TARGET = {
    "key": pb.RangeRequest.KEY,
    "version": pb.RangeRequest.VERSION,
    "create": pb.RangeRequest.CREATE,
    "mod": pb.RangeRequest.MOD,
    "value": pb.RangeRequest.VALUE,
}
_COMPARE_RESULT = {
    "==": pb.Compare.EQUAL,
    "!=": pb.Compare.NOT_EQUAL,
    "<": pb.Compare.LESS,
    ">": pb.Compare.GREATER,
}
_WATCH_FILTER = {"noput": pb.WatchCreateRequest.NOPUT, "nodelete": pb.WatchCreateRequest.NODELETE}

DEFAULT_PORT = 2379
# metadata key etcd reads the auth token from, and the "require leader" flag that makes a
# member close watch/keepalive streams when it loses its leader (clientv3.WithRequireLeader)
_TOKEN_KEY = "token"
_REQUIRE_LEADER = ("hasleader", "true")

T = TypeVar("T")


# --------------------------------------------------------------------------- errors


class EtcdError(Exception):
    """Any failure talking to etcd. ``code`` is the gRPC status code, when there is one."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """No healthy member answered in time (UNAVAILABLE or DEADLINE_EXCEEDED).

    The request may or may not have been applied: only retry requests that are safe to
    repeat (reads, create-if-absent transactions, guarded deletes).
    """


class EtcdLeaseNotFound(EtcdError):
    """The lease does not exist (never granted, revoked, or expired)."""


class EtcdCompacted(EtcdError):
    """The requested revision has been compacted away.

    ``compact_revision`` is the oldest revision still available (0 when unknown). A watch
    cannot be resumed from before it: re-read the state and start a new watch.
    """

    def __init__(
        self, message: str, code: grpc.StatusCode | None = None, compact_revision: int = 0
    ) -> None:
        super().__init__(message, code)
        self.compact_revision = compact_revision


class EtcdAuthError(EtcdError):
    """Authentication failed, the token was refused, or permission was denied."""


_AUTH_MARKERS = (
    "auth",
    "user name",
    "password",
    "permission denied",
    "token",
    "invalid user",
)


def map_rpc_error(exc: grpc.RpcError) -> EtcdError:
    """Translate a gRPC error (sync or ``grpc.aio``) into the :class:`EtcdError` tree.

    The caller should ``raise map_rpc_error(exc) from exc`` so the original error stays
    reachable as ``__cause__``.
    """
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    code: grpc.StatusCode | None = code_fn() if callable(code_fn) else None
    details = str(details_fn() if callable(details_fn) else exc) or ""
    return _error_for(code, details)


def _error_for(code: grpc.StatusCode | None, details: str) -> EtcdError:
    name = code.name if code is not None else "UNKNOWN"
    message = f"{name}: {details}"
    lowered = details.lower()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) or (
        # etcd itself reports its own request deadline as UNKNOWN: same meaning
        "context deadline exceeded" in lowered
        or "request timed out" in lowered
        or "leader changed" in lowered
    ):
        return EtcdUnavailable(message, code)
    if "lease not found" in lowered:
        return EtcdLeaseNotFound(message, code)
    if "compacted" in lowered:
        return EtcdCompacted(message, code)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or (
        code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)
        and any(marker in lowered for marker in _AUTH_MARKERS)
    ):
        return EtcdAuthError(message, code)
    return EtcdError(message, code)


_CANCEL_REASON = re.compile(r"code = (\w+) desc = (.*)", re.S)


def _error_for_cancel_reason(reason: str) -> EtcdError:
    """Classify a watch ``cancel_reason`` such as ``rpc error: code = X desc = Y``."""
    m = _CANCEL_REASON.search(reason)
    if m is None:
        return _error_for(None, reason)
    code = next((c for c in grpc.StatusCode if c.name == m.group(1).upper()), None)
    if code is None:  # Go spells them CamelCase: InvalidArgument, Unauthenticated, ...
        wanted = m.group(1).lower()
        code = next((c for c in grpc.StatusCode if c.name.replace("_", "").lower() == wanted), None)
    return _error_for(code, m.group(2))


def _is_invalid_token(exc: grpc.RpcError | EtcdError) -> bool:
    if isinstance(exc, EtcdError):
        return "invalid auth token" in str(exc).lower()
    details_fn = getattr(exc, "details", None)
    details = str(details_fn() if callable(details_fn) else "").lower()
    return "invalid auth token" in details


def retry_unavailable(
    fn: Callable[[], T],
    *,
    timeout: float,
    initial_backoff: float = 0.02,
    max_backoff: float = 0.5,
) -> T:
    """Call ``fn`` until it does not raise :class:`EtcdUnavailable`, for up to ``timeout`` s.

    Backoff doubles from ``initial_backoff`` to ``max_backoff``. When the time is up the
    last :class:`EtcdUnavailable` is raised. Only use it for calls that are safe to repeat
    (a failed attempt may have been applied).
    """
    deadline = time.monotonic() + timeout
    backoff = initial_backoff
    while True:
        try:
            return fn()
        except EtcdUnavailable:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            logger.debug("etcd unavailable, retrying in %.3f s", min(backoff, remaining))
            time.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, max_backoff)


# --------------------------------------------------------------------------- keys


def _b(value: Key) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def prefix_range_end(prefix: Key) -> bytes:
    """Return the ``range_end`` that selects every key starting with ``prefix``.

    The last byte that is not 0xff is incremented and the rest dropped
    (``b"a/" -> b"a0"``, ``b"a\\xff" -> b"b"``). An empty or all-0xff prefix gives
    ``b"\\x00"``, which etcd reads as "every key >= key".
    """
    p = bytearray(_b(prefix))
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return b"\x00"


# --------------------------------------------------------------------------- request builders


def range_request(
    key: Key,
    range_end: Key = b"",
    *,
    limit: int = 0,
    sort_order: SortOrder = "none",
    sort_target: SortTarget = "key",
    keys_only: bool = False,
    count_only: bool = False,
    serializable: bool = False,
    max_create_revision: int = 0,
    min_create_revision: int = 0,
    max_mod_revision: int = 0,
    min_mod_revision: int = 0,
    revision: int = 0,
) -> pb.RangeRequest:
    """Build a RangeRequest; the keyword names and meanings are those of etcd."""
    return pb.RangeRequest(
        key=_b(key),
        range_end=_b(range_end),
        limit=limit,
        revision=revision,
        sort_order=_SORT_ORDER[sort_order],
        sort_target=_SORT_TARGET[sort_target],
        serializable=serializable,
        keys_only=keys_only,
        count_only=count_only,
        min_mod_revision=min_mod_revision,
        max_mod_revision=max_mod_revision,
        min_create_revision=min_create_revision,
        max_create_revision=max_create_revision,
    )


def put_request(
    key: Key,
    value: Key,
    *,
    lease: int = 0,
    prev_kv: bool = False,
    ignore_value: bool = False,
    ignore_lease: bool = False,
) -> pb.PutRequest:
    """Build a PutRequest."""
    return pb.PutRequest(
        key=_b(key),
        value=_b(value),
        lease=lease,
        prev_kv=prev_kv,
        ignore_value=ignore_value,
        ignore_lease=ignore_lease,
    )


def delete_request(
    key: Key, range_end: Key = b"", *, prev_kv: bool = False
) -> pb.DeleteRangeRequest:
    """Build a DeleteRangeRequest."""
    return pb.DeleteRangeRequest(key=_b(key), range_end=_b(range_end), prev_kv=prev_kv)


class Compare:
    """Builders for transaction guards: ``Compare.create_revision(key, "==", 0)``.

    ``op`` is one of ``"=="``, ``"!="``, ``"<"``, ``">"``. ``range_end`` makes the guard
    hold for every key in ``[key, range_end)``.
    """

    @staticmethod
    def _make(
        key: Key, op: CompareOp, target: pb.Compare.CompareTarget, range_end: Key, **union: Any
    ) -> pb.Compare:
        return pb.Compare(
            result=_COMPARE_RESULT[op], target=target, key=_b(key), range_end=_b(range_end), **union
        )

    @staticmethod
    def version(key: Key, op: CompareOp, version: int, *, range_end: Key = b"") -> pb.Compare:
        """Compare the key's version (0 when the key does not exist)."""
        return Compare._make(key, op, pb.Compare.VERSION, range_end, version=version)

    @staticmethod
    def create_revision(
        key: Key, op: CompareOp, revision: int, *, range_end: Key = b""
    ) -> pb.Compare:
        """Compare the key's create_revision (0 when the key does not exist)."""
        return Compare._make(key, op, pb.Compare.CREATE, range_end, create_revision=revision)

    @staticmethod
    def mod_revision(key: Key, op: CompareOp, revision: int, *, range_end: Key = b"") -> pb.Compare:
        """Compare the key's mod_revision (0 when the key does not exist)."""
        return Compare._make(key, op, pb.Compare.MOD, range_end, mod_revision=revision)

    @staticmethod
    def value(key: Key, op: CompareOp, value: Key, *, range_end: Key = b"") -> pb.Compare:
        """Compare the key's value (a missing key never matches)."""
        return Compare._make(key, op, pb.Compare.VALUE, range_end, value=_b(value))

    @staticmethod
    def lease(key: Key, op: CompareOp, lease: int, *, range_end: Key = b"") -> pb.Compare:
        """Compare the key's lease id (0 for no lease or a missing key)."""
        return Compare._make(key, op, pb.Compare.LEASE, range_end, lease=lease)


class Op:
    """Builders for the operations of a transaction branch."""

    @staticmethod
    def put(
        key: Key,
        value: Key,
        *,
        lease: int = 0,
        prev_kv: bool = False,
        ignore_value: bool = False,
        ignore_lease: bool = False,
    ) -> pb.RequestOp:
        """A put; see :meth:`EtcdClient.put`."""
        return pb.RequestOp(
            request_put=put_request(
                key,
                value,
                lease=lease,
                prev_kv=prev_kv,
                ignore_value=ignore_value,
                ignore_lease=ignore_lease,
            )
        )

    @staticmethod
    def range(
        key: Key,
        range_end: Key = b"",
        *,
        limit: int = 0,
        sort_order: SortOrder = "none",
        sort_target: SortTarget = "key",
        keys_only: bool = False,
        count_only: bool = False,
        max_create_revision: int = 0,
        min_create_revision: int = 0,
    ) -> pb.RequestOp:
        """A range; inside a txn it sees the writes of earlier ops of the same branch."""
        return pb.RequestOp(
            request_range=range_request(
                key,
                range_end,
                limit=limit,
                sort_order=sort_order,
                sort_target=sort_target,
                keys_only=keys_only,
                count_only=count_only,
                max_create_revision=max_create_revision,
                min_create_revision=min_create_revision,
            )
        )

    @staticmethod
    def delete(key: Key, range_end: Key = b"", *, prev_kv: bool = False) -> pb.RequestOp:
        """A delete of ``key`` (or of ``[key, range_end)``)."""
        return pb.RequestOp(request_delete_range=delete_request(key, range_end, prev_kv=prev_kv))

    @staticmethod
    def txn(
        compare: Sequence[pb.Compare],
        success: Sequence[pb.RequestOp] = (),
        failure: Sequence[pb.RequestOp] = (),
    ) -> pb.RequestOp:
        """A nested transaction (etcd 3.3+)."""
        return pb.RequestOp(
            request_txn=pb.TxnRequest(compare=compare, success=success, failure=failure)
        )


# --------------------------------------------------------------------------- channel


@dataclass(frozen=True)
class ChannelConfig:
    """Everything needed to open a (sync or aio) channel to an etcd cluster."""

    target: str
    credentials: grpc.ChannelCredentials | None
    options: tuple[tuple[str, Any], ...]


def _parse_endpoint(endpoint: str) -> tuple[str, int, bool]:
    """``host:port``, ``[v6]:port``, ``host``, optionally ``http://``/``https://``."""
    tls = False
    ep = endpoint.strip()
    for scheme in ("http://", "https://"):
        if ep.startswith(scheme):
            tls = scheme == "https://"
            ep = ep[len(scheme) :]
    ep = ep.rstrip("/")
    if not ep:
        raise ValueError(f"empty etcd endpoint: {endpoint!r}")
    if ep.startswith("["):
        host, _, rest = ep[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else DEFAULT_PORT
    elif ep.count(":") == 1:
        host, _, port_s = ep.partition(":")
        port = int(port_s)
    elif ep.count(":") > 1:  # bare IPv6 address without a port
        host, port = ep, DEFAULT_PORT
    else:
        host, port = ep, DEFAULT_PORT
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad etcd endpoint: {endpoint!r}")
    return host, port, tls


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


def _build_target(hosts: Sequence[tuple[str, int]]) -> tuple[str, str | None]:
    """Return (target, authority override) for one or several endpoints."""
    if len(hosts) == 1:
        host, port = hosts[0]
        return (f"[{host}]:{port}" if _ip_version(host) == 6 else f"{host}:{port}"), None
    versions = {_ip_version(h) for h, _ in hosts}
    if versions == {4}:
        return "ipv4:" + ",".join(f"{h}:{p}" for h, p in hosts), None
    if versions == {6}:
        return "ipv6:" + ",".join(f"[{h}]:{p}" for h, p in hosts), None
    # Host names: gRPC's multi-address targets take literal addresses only, so resolve
    # now (once) and keep the first name as the authority (TLS host name check).
    v4: list[str] = []
    v6: list[str] = []
    for host, port in hosts:
        if _ip_version(host) == 4:
            v4.append(f"{host}:{port}")
            continue
        if _ip_version(host) == 6:
            v6.append(f"[{host}]:{port}")
            continue
        for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            addr = str(sockaddr[0])
            if family == socket.AF_INET and f"{addr}:{port}" not in v4:
                v4.append(f"{addr}:{port}")
            elif family == socket.AF_INET6 and f"[{addr}]:{port}" not in v6:
                v6.append(f"[{addr}]:{port}")
    authority = next((h for h, _ in hosts if _ip_version(h) is None), None)
    if v4:
        return "ipv4:" + ",".join(v4), authority
    return "ipv6:" + ",".join(v6), authority


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as fh:
        return fh.read()


def channel_config(
    endpoints: Sequence[str],
    *,
    ca_cert: str | None = None,
    cert_key: str | None = None,
    cert_cert: str | None = None,
    keepalive_time: float = 10.0,
    keepalive_timeout: float = 5.0,
) -> ChannelConfig:
    """Build the target, credentials and channel options for ``endpoints``.

    Several endpoints become one channel with gRPC's multi-address target
    (``ipv4:h1:p1,h2:p2``): the channel connects to the first member that answers and
    moves to another when that connection breaks. Host names are resolved once, here.
    TLS is used when any of the certificate arguments is given or an endpoint starts
    with ``https://``. HTTP/2 keepalive pings (every ``keepalive_time`` s while a call
    is open; etcd refuses pings more often than every 5 s) detect a dead member under a
    long-lived stream, and reconnect backoff is capped at 2 s.
    """
    if not endpoints:
        raise ValueError("at least one etcd endpoint is needed")
    if (cert_key is None) != (cert_cert is None):
        raise ValueError("cert_key and cert_cert must be given together")
    parsed = [_parse_endpoint(ep) for ep in endpoints]
    tls = any(t for _, _, t in parsed) or any(x is not None for x in (ca_cert, cert_key, cert_cert))
    target, authority = _build_target([(h, p) for h, p, _ in parsed])
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", 2**31 - 1),
        ("grpc.max_send_message_length", 2**31 - 1),
        ("grpc.keepalive_time_ms", int(keepalive_time * 1000)),
        ("grpc.keepalive_timeout_ms", int(keepalive_timeout * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        # (not grpc.min_reconnect_backoff_ms: gRPC uses it as the connect timeout, and
        # etcd accepts TCP before it speaks HTTP/2 while it starts)
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
    ]
    if authority is not None and tls:
        options.append(("grpc.default_authority", authority))
    credentials = None
    if tls:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(ca_cert),
            private_key=_read(cert_key),
            certificate_chain=_read(cert_cert),
        )
    return ChannelConfig(target=target, credentials=credentials, options=tuple(options))


# --------------------------------------------------------------------------- client


class EtcdClient:
    """A connection to an etcd v3 cluster: one gRPC channel, typed unary calls.

    ``endpoints`` are ``host:port`` strings; several give failover (see
    :func:`channel_config`). ``timeout`` is the default deadline of each unary call, in
    seconds; every call also takes ``timeout=`` to override it.

    With ``user``/``password`` the client authenticates on first use and sends the token
    with every call; when the server says the token is invalid (expired, or the server
    restarted) it authenticates again once and repeats the call.

    Calls wait for the channel to (re)connect until their deadline (gRPC
    ``wait_for_ready``, like etcd's Go client), so a member restart or a failover shorter
    than the timeout is absorbed; with ``wait_for_ready=False`` they fail at once while
    no member is reachable. A call whose connection breaks while it is in flight, or
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
        wait_for_ready: bool = True,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if (user is None) != (password is None):
            raise ValueError("user and password must be given together")
        self.endpoints: tuple[str, ...] = tuple(endpoints)
        self.timeout = timeout
        self.wait_for_ready = wait_for_ready
        self.config = channel_config(
            self.endpoints, ca_cert=ca_cert, cert_key=cert_key, cert_cert=cert_cert
        )
        if self.config.credentials is not None:
            self._channel: Any = grpc.secure_channel(
                self.config.target, self.config.credentials, options=self.config.options
            )
        else:
            self._channel = grpc.insecure_channel(self.config.target, options=self.config.options)
        self._kv: Any = _rpc.KVStub(self._channel)
        self._lease: Any = _rpc.LeaseStub(self._channel)
        self._watch: Any = _rpc.WatchStub(self._channel)
        self._auth: Any = _rpc.AuthStub(self._channel)
        self._maintenance: Any = _rpc.MaintenanceStub(self._channel)
        self._user = user
        self._password = password
        self._token: str | None = None
        self._auth_lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ plumbing

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def user(self) -> str | None:
        """The user the client authenticates as; None: anonymous."""
        return self._user

    @property
    def uses_auth(self) -> bool:
        """True when the client authenticates (``user``/``password`` given)."""
        return self._user is not None

    @property
    def channel(self) -> Any:
        """The underlying ``grpc.Channel`` (for stubs of RPCs this class does not wrap)."""
        return self._channel

    def _authenticate(self, stale: str | None) -> str:
        with self._auth_lock:
            if self._token is not None and self._token != stale:
                return self._token  # another thread refreshed it meanwhile
            req = pb.AuthenticateRequest(name=self._user or "", password=self._password or "")
            try:
                resp = self._auth.Authenticate(
                    req, timeout=self.timeout, wait_for_ready=self.wait_for_ready
                )
            except grpc.RpcError as exc:
                err = map_rpc_error(exc)
                if type(err) is EtcdError:
                    err = EtcdAuthError(str(err), err.code)
                raise err from exc
            token = str(resp.token)
            self._token = token
            logger.debug("etcd: authenticated as %r", self._user)
            return token

    def metadata(self, *extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
        """The call metadata: the auth token (authenticating first if needed) and ``extra``."""
        if self._closed:
            raise EtcdError("the etcd client is closed")
        if self._user is None:
            return tuple(extra)
        token = self._token or self._authenticate(None)
        return ((_TOKEN_KEY, token), *extra)

    def refresh_token(self, stale: tuple[tuple[str, str], ...]) -> None:
        """Authenticate again if ``stale`` (metadata of a refused call) holds the current token."""
        if self._user is None:
            return
        old = next((v for k, v in stale if k == _TOKEN_KEY), None)
        self._authenticate(old)

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        md = self.metadata()
        try:
            return method(
                request,
                timeout=self.timeout if timeout is None else timeout,
                metadata=md,
                wait_for_ready=self.wait_for_ready,
            )
        except grpc.RpcError as exc:
            if self._user is not None and _is_invalid_token(exc):
                logger.info("etcd: auth token refused, authenticating again")
                self.refresh_token(md)
                try:
                    return method(
                        request,
                        timeout=self.timeout if timeout is None else timeout,
                        metadata=self.metadata(),
                        wait_for_ready=self.wait_for_ready,
                    )
                except grpc.RpcError as exc2:
                    raise map_rpc_error(exc2) from exc2
            raise map_rpc_error(exc) from exc
        except ValueError as exc:  # "Cannot invoke RPC on closed channel!"
            if self._closed:
                raise EtcdError("the etcd client is closed") from exc
            raise

    # ------------------------------------------------------------------ KV

    def range(
        self,
        key: Key,
        range_end: Key = b"",
        *,
        limit: int = 0,
        sort_order: SortOrder = "none",
        sort_target: SortTarget = "key",
        keys_only: bool = False,
        count_only: bool = False,
        serializable: bool = False,
        max_create_revision: int = 0,
        min_create_revision: int = 0,
        max_mod_revision: int = 0,
        min_mod_revision: int = 0,
        revision: int = 0,
        timeout: float | None = None,
    ) -> pb.RangeResponse:
        """Read ``key``, or the keys in ``[key, range_end)``.

        ``count`` in the response is the number of keys in the range, unaffected by
        ``limit`` and by the min/max revision filters. ``serializable`` reads from the
        member the channel is connected to without a quorum round (may be stale).
        Raises :class:`EtcdCompacted` for a compacted ``revision`` and
        :class:`EtcdUnavailable` on connection loss (safe to retry).
        """
        req = range_request(
            key,
            range_end,
            limit=limit,
            sort_order=sort_order,
            sort_target=sort_target,
            keys_only=keys_only,
            count_only=count_only,
            serializable=serializable,
            max_create_revision=max_create_revision,
            min_create_revision=min_create_revision,
            max_mod_revision=max_mod_revision,
            min_mod_revision=min_mod_revision,
            revision=revision,
        )
        resp: pb.RangeResponse = self._call(self._kv.Range, req, timeout)
        return resp

    def put(
        self,
        key: Key,
        value: Key,
        *,
        lease: int = 0,
        prev_kv: bool = False,
        ignore_value: bool = False,
        ignore_lease: bool = False,
        timeout: float | None = None,
    ) -> pb.PutResponse:
        """Write ``key``; with ``lease`` the key is deleted when the lease ends.

        Raises :class:`EtcdLeaseNotFound` if the lease is gone, :class:`EtcdUnavailable`
        on connection loss (the put may have been applied).
        """
        req = put_request(
            key,
            value,
            lease=lease,
            prev_kv=prev_kv,
            ignore_value=ignore_value,
            ignore_lease=ignore_lease,
        )
        resp: pb.PutResponse = self._call(self._kv.Put, req, timeout)
        return resp

    def delete_range(
        self, key: Key, range_end: Key = b"", *, prev_kv: bool = False, timeout: float | None = None
    ) -> pb.DeleteRangeResponse:
        """Delete ``key`` or ``[key, range_end)``; ``deleted`` counts the keys removed.

        Raises :class:`EtcdUnavailable` on connection loss (may have been applied).
        """
        resp: pb.DeleteRangeResponse = self._call(
            self._kv.DeleteRange, delete_request(key, range_end, prev_kv=prev_kv), timeout
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
        req = pb.TxnRequest(compare=compare, success=success, failure=failure)
        resp: pb.TxnResponse = self._call(self._kv.Txn, req, timeout)
        return resp

    def compact(
        self, revision: int, *, physical: bool = False, timeout: float | None = None
    ) -> pb.CompactionResponse:
        """Compact the history up to ``revision`` (tests and maintenance only)."""
        req = pb.CompactionRequest(revision=revision, physical=physical)
        resp: pb.CompactionResponse = self._call(self._kv.Compact, req, timeout)
        return resp

    # ------------------------------------------------------------------ leases

    def lease_grant(
        self, ttl: int, *, lease_id: int = 0, timeout: float | None = None
    ) -> tuple[int, int]:
        """Grant a lease of ``ttl`` seconds; return ``(lease_id, granted_ttl)``.

        The server may grant a longer TTL than asked (its minimum depends on the election
        timeout). Raises :class:`EtcdUnavailable` on connection loss (a lease may have
        been granted anyway; it expires by itself after its TTL).
        """
        resp: pb.LeaseGrantResponse = self._call(
            self._lease.LeaseGrant, pb.LeaseGrantRequest(TTL=ttl, ID=lease_id), timeout
        )
        if resp.error:
            raise EtcdError(f"lease grant refused: {resp.error}")
        return int(resp.ID), int(resp.TTL)

    def lease_revoke(self, lease_id: int, *, timeout: float | None = None) -> None:
        """Revoke a lease; every key attached to it is deleted in the same revision.

        Raises :class:`EtcdLeaseNotFound` if it is already gone.
        """
        self._call(self._lease.LeaseRevoke, pb.LeaseRevokeRequest(ID=lease_id), timeout)

    def lease_time_to_live(
        self, lease_id: int, *, keys: bool = False, timeout: float | None = None
    ) -> pb.LeaseTimeToLiveResponse:
        """Remaining ``TTL`` of a lease (-1 when it does not exist), ``grantedTTL``, keys."""
        resp: pb.LeaseTimeToLiveResponse = self._call(
            self._lease.LeaseTimeToLive, pb.LeaseTimeToLiveRequest(ID=lease_id, keys=keys), timeout
        )
        return resp

    # ------------------------------------------------------------------ maintenance

    def status(self, *, timeout: float | None = None) -> pb.StatusResponse:
        """Status of the member the channel is connected to (version, leader id, ...)."""
        resp: pb.StatusResponse = self._call(self._maintenance.Status, pb.StatusRequest(), timeout)
        return resp

    # ------------------------------------------------------------------ streams

    def open_watch_stream(self, requests: Iterator[pb.WatchRequest]) -> Any:
        """Open a raw Watch stream; returns the response iterator. (Prefer
        :class:`semaphore_recipes.etcd.watch.Watcher`: one stream serves every watch.)"""
        try:
            return self._watch.Watch(
                requests,
                metadata=self.metadata(_REQUIRE_LEADER),
                wait_for_ready=self.wait_for_ready,
            )
        except ValueError as exc:  # grpc: "Cannot invoke RPC: Channel closed!"
            raise EtcdError(f"client closed: {exc}") from exc

    def open_keepalive_stream(self, requests: Iterator[pb.LeaseKeepAliveRequest]) -> Any:
        """Open a raw LeaseKeepAlive stream (prefer :class:`LeaseKeeper`)."""
        try:
            return self._lease.LeaseKeepAlive(
                requests,
                metadata=self.metadata(_REQUIRE_LEADER),
                wait_for_ready=self.wait_for_ready,
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

    def __repr__(self) -> str:
        return f"EtcdClient({list(self.endpoints)!r})"


# --------------------------------------------------------------------------- streams


def _safe_callback(what: str, fn: Callable[..., None] | None, *args: Any) -> None:
    if fn is None:
        return
    try:
        fn(*args)
    except Exception:
        logger.exception("etcd: %s callback raised", what)


class _Backoff:
    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.current = initial

    def reset(self) -> None:
        self.current = self.initial

    def next(self) -> float:
        value = self.current
        self.current = min(self.current * 2, self.maximum)
        return value


class LeaseKeeper:
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

    Stream errors are logged and the stream is re-opened with a backoff from 50 ms up
    to ``ttl / 6``. Callbacks run on the keeper's threads, one at a time; exceptions
    they raise are logged. :meth:`stop` ends the threads (it does not revoke the lease).
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
        start: bool = True,
    ) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.client = client
        self.lease_id = lease_id
        self.ttl = float(ttl)
        self.interval = ttl / 3.0 if interval is None else float(interval)
        self.suspend_after = 2.0 * ttl / 3.0 if suspend_after is None else float(suspend_after)
        self._on_expired = on_expired
        self._on_suspended = on_suspended
        self._on_restored = on_restored
        self._lock = threading.Lock()
        self._report_lock = threading.Lock()  # one suspended/restored report at a time
        self._stop = threading.Event()
        self._last_ack = time.monotonic()
        self._suspended = False
        self._expired = False
        self._call: Any = None
        self._opened = self._last_ack  # when the current stream was opened
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
    def last_ack(self) -> float:
        """``time.monotonic()`` of the last acknowledged keepalive (or of the start)."""
        return self._last_ack

    @property
    def suspended(self) -> bool:
        """True while acknowledgements are overdue."""
        return self._suspended

    @property
    def expired(self) -> bool:
        """True once the server said the lease is gone."""
        return self._expired

    @property
    def running(self) -> bool:
        """True while the keeper's thread runs."""
        return self._thread.is_alive()

    def start(self) -> None:
        """Start the threads (done by the constructor unless ``start=False``)."""
        self._last_ack = self._opened = time.monotonic()
        self._thread.start()
        self._watchdog.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop sending keepalives and join the threads (the lease is left to expire)."""
        self._stop.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()
        for thread in (self._thread, self._watchdog):
            if thread.is_alive() and threading.current_thread() is not thread:
                thread.join(timeout)

    # -------------------------------------------------------------- internals

    def _overdue(self) -> bool:
        return time.monotonic() - self._last_ack > self.suspend_after

    def _check_suspended(self) -> None:
        with self._report_lock:
            if self._suspended or not self._overdue() or self._stop.is_set():
                return
            self._suspended = True
            logger.warning(
                "etcd: lease %x: no keepalive acknowledged for %.2f s, suspended",
                self.lease_id,
                time.monotonic() - self._last_ack,
            )
            _safe_callback("on_suspended", self._on_suspended)

    def _acknowledged(self) -> None:
        self._last_ack = time.monotonic()
        if not self._suspended:
            return
        with self._report_lock:
            if not self._suspended or self._stop.is_set():
                return
            self._suspended = False
            logger.info("etcd: lease %x: keepalives acknowledged again", self.lease_id)
            _safe_callback("on_restored", self._on_restored)

    def _watch_acks(self) -> None:
        """The watchdog: reports the suspension when acknowledgements are overdue and
        cancels the silent stream so that ``_run`` opens a fresh one (once suspended, a
        re-opened stream gets ``suspend_after`` of its own before it is recycled again).
        It never reads the stream: a stream blocked waiting for a connection cannot
        hold it up."""
        cancelled: Any = None
        while not self._stop.is_set() and not self.client.closed:
            with self._lock:
                call, opened = self._call, self._opened
            ref = max(self._last_ack, opened) if self._suspended else self._last_ack
            wait = ref + self.suspend_after - time.monotonic()
            if wait <= 0:
                self._check_suspended()
                if call is not None and call is not cancelled:
                    self._stale = True
                    call.cancel()
                    cancelled = call
                wait = self.interval  # until the re-opened stream has had its chance
            self._stop.wait(max(0.01, min(wait, self.interval)))

    def _requests(self, done: threading.Event) -> Iterator[pb.LeaseKeepAliveRequest]:
        """Runs on gRPC's request thread: one keepalive now, then every interval."""
        req = pb.LeaseKeepAliveRequest(ID=self.lease_id)
        while not done.is_set() and not self._stop.is_set():
            yield req
            done.wait(self.interval)

    def _run(self) -> None:
        backoff = _Backoff(0.05, max(0.05, self.ttl / 6.0))
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
                    if resp.TTL <= 0:
                        self._expire(f"server answered TTL {resp.TTL}")
                        return
                    backoff.reset()
                    self._acknowledged()
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    return
                err = map_rpc_error(exc)
                if isinstance(err, EtcdLeaseNotFound):
                    self._expire(str(err))
                    return
                if self._stale:
                    logger.debug(
                        "etcd: lease %x: re-opening a silent keepalive stream", self.lease_id
                    )
                else:
                    logger.info("etcd: lease %x: keepalive stream failed: %s", self.lease_id, err)
                if isinstance(err, EtcdAuthError) and _is_invalid_token(exc):
                    self._refresh_token()
            except EtcdError as exc:  # closed client, or authentication failed
                if self._stop.is_set() or self.client.closed:
                    return
                logger.info("etcd: lease %x: cannot open keepalive stream: %s", self.lease_id, exc)
            finally:
                done.set()
                with self._lock:
                    self._call = None
            self._check_suspended()
            if self._stale:
                continue  # re-open at once; the server may just have been slow
            self._stop.wait(backoff.next())
            self._check_suspended()

    def _refresh_token(self) -> None:
        try:
            self.client.refresh_token(self.client.metadata())
        except EtcdError as exc:
            logger.info("etcd: authentication failed: %s", exc)

    def _expire(self, why: str) -> None:
        self._expired = True
        self._stop.set()  # the watchdog too: a lease that is gone is not "suspended"
        logger.warning("etcd: lease %x expired (%s)", self.lease_id, why)
        _safe_callback("on_expired", self._on_expired)
