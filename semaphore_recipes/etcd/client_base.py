"""What both etcd clients are made of: endpoints, default timeout, auth token, one channel
(``grpc`` or ``grpc.aio``, from the same :func:`~.channel.channel_config`) and its stubs."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from ._proto import etcd_api_pb2_grpc as _rpc_module
from .auth import AuthToken
from .channel import channel_config

__all__ = ["ClientBase", "stubs"]

# The generated *_pb2_grpc module has no type information; use it through Any.
_rpc: Any = _rpc_module


def stubs(channel: Any) -> dict[str, Any]:
    """The etcd services' stubs on ``channel`` (a ``grpc`` or a ``grpc.aio`` one), by
    service name (:attr:`.rpc.Rpc.service`)."""
    return {
        "KV": _rpc.KVStub(channel),
        "Lease": _rpc.LeaseStub(channel),
        "Watch": _rpc.WatchStub(channel),
        "Auth": _rpc.AuthStub(channel),
    }


class ClientBase:
    """One channel to an etcd cluster, opened with ``channels`` (the ``grpc`` or the
    ``grpc.aio`` module); see :class:`~.client.EtcdClient` for the arguments."""

    def __init__(
        self,
        endpoints: Sequence[str],
        channels: ModuleType,
        *,
        timeout: float,
        ca_cert: str | None,
        cert_key: str | None,
        cert_cert: str | None,
        user: str | None,
        password: str | None,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        self._auth = AuthToken(user, password, timeout)
        self.endpoints: tuple[str, ...] = tuple(endpoints)
        self.timeout = timeout
        config = channel_config(
            self.endpoints, ca_cert=ca_cert, cert_key=cert_key, cert_cert=cert_cert
        )
        if config.credentials is not None:
            self._channel: Any = channels.secure_channel(
                config.target, config.credentials, options=config.options
            )
        else:
            self._channel = channels.insecure_channel(config.target, options=config.options)
        self._stubs = stubs(self._channel)
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once the client was closed."""
        return self._closed

    @property
    def user(self) -> str | None:
        """The user the client authenticates as; None: anonymous."""
        return self._auth.user

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.endpoints)!r})"
