"""Users, roles and auth of a test etcd, set up through etcd's Auth gRPC service.

What an operator does with ``etcdctl user add`` / ``role grant-permission`` /
``auth enable``, done over the project's own gRPC layer, so the tests need no
``etcdctl`` (Debian's ``etcd-server`` package has none). Test harness only: the
library never administers etcd.

>>> with EtcdAuthAdmin(server.endpoint) as admin:                   # doctest: +SKIP
...     admin.enable_auth(root_password="s3cret")
...     admin.add_user("reader", "pw", prefix="/app/", access=Access.READ)
"""

from __future__ import annotations

import enum
from types import TracebackType
from typing import Any

import grpc

from ..etcd._proto import etcd_api_pb2 as pb
from ..etcd._proto import etcd_api_pb2_grpc as _rpc_module
from ..etcd.client import EtcdClient
from ..etcd.errors import map_rpc_error
from ..etcd.ops import prefix_range_end

_rpc: Any = _rpc_module  # generated without type hints

__all__ = ["Access", "EtcdAuthAdmin"]

ROOT = "root"  # etcd's built-in superuser name and role


class Access(enum.Enum):
    """What a role may do with its key range (etcd's ``authpb.Permission.Type``)."""

    READ = pb.Permission.READ
    WRITE = pb.Permission.WRITE
    READWRITE = pb.Permission.READWRITE


class EtcdAuthAdmin:
    """Administers users and roles of one etcd member or cluster.

    Before :meth:`enable_auth` no credentials are needed; afterwards open a new admin
    with ``user="root"`` and the root password (an open admin switches to root itself
    inside :meth:`enable_auth`). Each call raises the etcd layer's ``EtcdError``
    subclasses (``EtcdAuthError`` when refused) and is bounded by ``timeout`` seconds.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        user: str | None = None,
        password: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._endpoint = endpoint
        self._timeout = timeout
        self._client = EtcdClient([endpoint], timeout=timeout, user=user, password=password)
        self._auth: Any = _rpc.AuthStub(self._client.channel)

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self._auth, method)(
                request, timeout=self._timeout, metadata=self._client.metadata()
            )
        except grpc.RpcError as exc:
            raise map_rpc_error(exc) from exc

    def add_role(self, role: str) -> None:
        self._call("RoleAdd", pb.AuthRoleAddRequest(name=role))

    def grant_prefix(self, role: str, prefix: str, access: Access) -> None:
        """Give ``role`` ``access`` to every key that starts with ``prefix``."""
        key = prefix.encode()
        perm = pb.Permission(permType=access.value, key=key, range_end=prefix_range_end(key))
        self._call("RoleGrantPermission", pb.AuthRoleGrantPermissionRequest(name=role, perm=perm))

    def add_user(
        self,
        user: str,
        password: str,
        *,
        prefix: str | None = None,
        access: Access = Access.READWRITE,
    ) -> None:
        """Add ``user``; with ``prefix``, also a role of the same name with ``access``
        to that key prefix, granted to the user."""
        self._call("UserAdd", pb.AuthUserAddRequest(name=user, password=password))
        if prefix is not None:
            self.add_role(user)
            self.grant_prefix(user, prefix, access)
            self.grant_role(user, user)

    def grant_role(self, user: str, role: str) -> None:
        self._call("UserGrantRole", pb.AuthUserGrantRoleRequest(user=user, role=role))

    def enable_auth(self, root_password: str) -> None:
        """Add the ``root`` user (with the ``root`` role) and turn auth on; this admin
        then acts as root."""
        self._call("UserAdd", pb.AuthUserAddRequest(name=ROOT, password=root_password))
        self.add_role(ROOT)
        self.grant_role(ROOT, ROOT)
        self._call("AuthEnable", pb.AuthEnableRequest())
        self._client.close()
        self._client = EtcdClient(
            [self._endpoint], timeout=self._timeout, user=ROOT, password=root_password
        )
        self._auth = _rpc.AuthStub(self._client.channel)

    def disable_auth(self) -> None:
        self._call("AuthDisable", pb.AuthDisableRequest())

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EtcdAuthAdmin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
