"""The etcd layer's errors: what every call raises instead of :class:`grpc.RpcError`.

:func:`map_rpc_error` sorts a gRPC error (sync or ``grpc.aio``) into the tree; the
caller raises ``map_rpc_error(exc) from exc`` so the original error stays reachable as
``__cause__``. No I/O here.
"""

from __future__ import annotations

import re

import grpc

__all__ = [
    "EtcdAuthError",
    "EtcdCompacted",
    "EtcdError",
    "EtcdLeaseNotFound",
    "EtcdUnavailable",
    "error_for_cancel_reason",
    "is_invalid_token",
    "map_rpc_error",
]


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
    """A watch's start revision has been compacted away.

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
    """Translate a gRPC error (sync or ``grpc.aio``) into the :class:`EtcdError` tree."""
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
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or (
        code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)
        and any(marker in lowered for marker in _AUTH_MARKERS)
    ):
        return EtcdAuthError(message, code)
    return EtcdError(message, code)


_CANCEL_REASON = re.compile(r"code = (\w+) desc = (.*)", re.S)


def error_for_cancel_reason(reason: str) -> EtcdError:
    """Classify a watch ``cancel_reason`` such as ``rpc error: code = X desc = Y``."""
    m = _CANCEL_REASON.search(reason)
    if m is None:
        return _error_for(None, reason)
    code = next((c for c in grpc.StatusCode if c.name == m.group(1).upper()), None)
    if code is None:  # Go spells them CamelCase: InvalidArgument, Unauthenticated, ...
        wanted = m.group(1).lower()
        code = next((c for c in grpc.StatusCode if c.name.replace("_", "").lower() == wanted), None)
    return _error_for(code, m.group(2))


def is_invalid_token(exc: grpc.RpcError | EtcdError) -> bool:
    """True when etcd refused the call's auth token (expired, or the server restarted)."""
    if isinstance(exc, EtcdError):
        return "invalid auth token" in str(exc).lower()
    details_fn = getattr(exc, "details", None)
    details = str(details_fn() if callable(details_fn) else "").lower()
    return "invalid auth token" in details
