"""An etcd RPC to make, as a value: what the etcd layer's programs yield.

A step of the recipe (the enqueue txn and its retries, a guarded delete, a lease grant)
is written once as a program (``_core.program``) that yields :class:`Call` values (and
:class:`Pause` between retries, :class:`UndoCreate` to delete an entry whose create may
still be on its way, :class:`AwaitCreated` to wait for watches' confirmations) and
receives each call's reply, or has the call's :class:`~.errors.EtcdError` thrown in.
The sync face answers a :class:`Call` with :meth:`EtcdClient.execute
<.client.EtcdClient.execute>` (blocking), the asyncio face
with :meth:`AioEtcdClient.execute <.aio_client.AioEtcdClient.execute>` (awaited); both
add the auth token (:mod:`.auth`). No I/O here.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._core.program import Program
from ._proto import etcd_api_pb2 as pb
from .errors import EtcdError
from .ops import Key, delete_request, put_request, range_request

if TYPE_CHECKING:
    from .watch import Watcher

__all__ = ["Call", "Pause", "Rpc", "UndoCreate", "granted_lease"]


class Rpc(enum.Enum):
    """The unary RPCs the library makes: ``(service, method)`` of etcd's API."""

    RANGE = ("KV", "Range")
    PUT = ("KV", "Put")
    DELETE_RANGE = ("KV", "DeleteRange")
    TXN = ("KV", "Txn")
    LEASE_GRANT = ("Lease", "LeaseGrant")
    LEASE_REVOKE = ("Lease", "LeaseRevoke")
    LEASE_TIME_TO_LIVE = ("Lease", "LeaseTimeToLive")
    AUTHENTICATE = ("Auth", "Authenticate")

    @property
    def service(self) -> str:
        return str(self.value[0])

    @property
    def method(self) -> str:
        return str(self.value[1])


@dataclass(frozen=True)
class Call:
    """Call ``rpc`` with ``request``, waiting at most ``timeout`` seconds (None: the
    client's default). ``creates``: the queue entry this call may create; the asyncio
    client does not cancel such a call with its task, and the entry's undo waits for
    its end (:meth:`~.aio_client.AioEtcdClient.settled`), so the undo never overtakes
    it (gRPC does not order calls, and a cancelled call may still reach the server)."""

    rpc: Rpc
    request: Any = field(repr=False)  # (an Authenticate request holds the password)
    timeout: float | None = None
    creates: str | None = None

    @staticmethod
    def range(
        key: Key,
        range_end: Key = b"",
        *,
        keys_only: bool = False,
        max_create_revision: int = 0,
        newest: int = 0,
        timeout: float | None = None,
    ) -> Call:
        """See :func:`~.ops.range_request`."""
        request = range_request(
            key,
            range_end,
            keys_only=keys_only,
            max_create_revision=max_create_revision,
            newest=newest,
        )
        return Call(Rpc.RANGE, request, timeout)

    @staticmethod
    def put(key: Key, value: Key, *, lease: int = 0, timeout: float | None = None) -> Call:
        return Call(Rpc.PUT, put_request(key, value, lease=lease), timeout)

    @staticmethod
    def delete_range(key: Key, range_end: Key = b"", *, timeout: float | None = None) -> Call:
        return Call(Rpc.DELETE_RANGE, delete_request(key, range_end), timeout)

    @staticmethod
    def txn(
        compare: Sequence[pb.Compare],
        success: Sequence[pb.RequestOp] = (),
        failure: Sequence[pb.RequestOp] = (),
        *,
        timeout: float | None = None,
        creates: str | None = None,
    ) -> Call:
        request = pb.TxnRequest(compare=compare, success=success, failure=failure)
        return Call(Rpc.TXN, request, timeout, creates)

    @staticmethod
    def lease_grant(ttl: int, *, timeout: float | None = None) -> Call:
        """Its reply goes through :func:`granted_lease`."""
        return Call(Rpc.LEASE_GRANT, pb.LeaseGrantRequest(TTL=ttl), timeout)

    @staticmethod
    def lease_revoke(lease_id: int, *, timeout: float | None = None) -> Call:
        return Call(Rpc.LEASE_REVOKE, pb.LeaseRevokeRequest(ID=lease_id), timeout)

    @staticmethod
    def lease_time_to_live(lease_id: int, *, timeout: float | None = None) -> Call:
        return Call(Rpc.LEASE_TIME_TO_LIVE, pb.LeaseTimeToLiveRequest(ID=lease_id), timeout)


@dataclass(frozen=True)
class AwaitCreated:
    """Wait until the server has confirmed each of ``watchers``, at most ``timeout``
    seconds in all (``Watcher.created``; awaited: ``Watcher.when_created``)."""

    watchers: tuple[Watcher, ...]
    timeout: float


@dataclass(frozen=True)
class Pause:
    """Sleep ``seconds`` (a retry's backoff): ``time.sleep`` or ``asyncio.sleep``."""

    seconds: float


@dataclass(frozen=True)
class UndoCreate:
    """Run ``undo`` (the delete of ``entry``) once the call that may create ``entry``
    has ended, waiting for it at most ``timeout`` seconds; it goes on in the background
    after that. Blocking, the create is over already (the sync runner holds an
    interrupt until a call returns): ``undo`` runs at once. Awaited, a cancelled
    acquire's create may still be on its way (:meth:`.aio_client.AioEtcdClient.settled`)
    and ``undo`` runs as a task of the loop, which a cancel of the awaiting task does
    not end."""

    entry: str
    undo: Program[None] = field(repr=False)
    timeout: float


def granted_lease(reply: pb.LeaseGrantResponse) -> tuple[int, int]:
    """``(lease_id, granted_ttl)`` of a LeaseGrant reply; EtcdError if it was refused."""
    if reply.error:
        raise EtcdError(f"lease grant refused: {reply.error}")
    return int(reply.ID), int(reply.TTL)
