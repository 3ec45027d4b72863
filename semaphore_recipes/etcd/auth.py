"""The auth token of a client: logging in, sending it, logging in again when refused.

Written once as programs (``_core.program``) for both clients: :meth:`AuthToken.call`
makes one :class:`~.rpc.Call` with the token in its metadata, and when etcd says the
token is invalid (it expired, or the server restarted) logs in again once and repeats
the call. It yields :class:`Send` (a raw gRPC call: its ``grpc.RpcError`` is thrown
back in) and :class:`Login` (log in unless another caller already did: each client
makes that single-flight its own way, a lock or an ``asyncio.Lock``). Every error
leaves as an :class:`~.errors.EtcdError`. No I/O here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import grpc

from .._core.program import Program
from ._proto import etcd_api_pb2 as pb
from .errors import EtcdAuthError, EtcdError, is_invalid_token, map_rpc_error
from .rpc import Call, Rpc

__all__ = ["REQUIRE_LEADER", "AuthToken", "Login", "Metadata", "Send"]

logger = logging.getLogger("semaphore_recipes.etcd")

Metadata = tuple[tuple[str, str], ...]

# metadata key etcd reads the auth token from, and the "require leader" flag that makes a
# member close watch/keepalive streams when it loses its leader (clientv3.WithRequireLeader)
TOKEN_KEY = "token"
REQUIRE_LEADER = ("hasleader", "true")


@dataclass(frozen=True)
class Send:
    """Make ``call`` on the channel with ``metadata``, as is (no retry, no mapping)."""

    call: Call
    metadata: Metadata = field(repr=False)  # (holds the auth token)


@dataclass(frozen=True)
class Login:
    """Log in, unless the token is no longer ``stale`` (someone else logged in): the
    reply is the token to use."""

    stale: str | None = field(repr=False)  # (an auth token)


class AuthToken:
    """The user, password and current token of one client (anonymous: ``user`` None)."""

    def __init__(self, user: str | None, password: str | None, timeout: float) -> None:
        if (user is None) != (password is None):
            raise ValueError("user and password must be given together")
        self.user = user
        self._password = password
        self._timeout = timeout
        self.token: str | None = None

    def login(self, stale: str | None) -> Program[str]:
        """Log in (run under the client's single-flight: see :class:`Login`)."""
        if self.token is not None and self.token != stale:
            return self.token  # another caller refreshed it meanwhile
        request = pb.AuthenticateRequest(name=self.user or "", password=self._password or "")
        try:
            reply: Any = yield Send(Call(Rpc.AUTHENTICATE, request, self._timeout), ())
        except grpc.RpcError as exc:
            err = map_rpc_error(exc)
            if type(err) is EtcdError:
                err = EtcdAuthError(str(err), err.code)
            raise err from exc
        token = str(reply.token)
        self.token = token
        logger.debug("etcd: authenticated as %r", self.user)
        return token

    def metadata(self, *extra: tuple[str, str]) -> Program[Metadata]:
        """The call metadata: the token (logging in first if there is none) and ``extra``."""
        if self.user is None:
            return tuple(extra)
        token = self.token
        if token is None:
            fresh = yield Login(None)
            assert isinstance(fresh, str)
            token = fresh
        return ((TOKEN_KEY, token), *extra)

    def refresh(self, stale: Metadata) -> Program[None]:
        """Log in again if ``stale`` (the metadata of a refused call) holds the token."""
        if self.user is not None:
            yield Login(next((v for k, v in stale if k == TOKEN_KEY), None))

    def call(self, call: Call) -> Program[Any]:
        """Make ``call``; its reply, or an :class:`~.errors.EtcdError`."""
        metadata = yield from self.metadata()
        try:
            return (yield Send(call, metadata))
        except grpc.RpcError as exc:
            if self.user is None or not is_invalid_token(exc):
                raise map_rpc_error(exc) from exc
        logger.info("etcd: auth token refused, authenticating again")
        yield from self.refresh(metadata)
        metadata = yield from self.metadata()
        try:
            return (yield Send(call, metadata))
        except grpc.RpcError as exc:
            raise map_rpc_error(exc) from exc
