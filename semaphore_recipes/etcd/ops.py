"""Request builders: keys, ranges, puts, deletes, and transactions' guards and operations.

Only what the recipe and its test harness send: every range, whether a call of its own
(:meth:`EtcdClient.range`) or an operation of a transaction (:meth:`Op.range`), is built
by :func:`range_request`. No I/O here, so an asyncio face can reuse them with ``grpc.aio``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ._proto import etcd_api_pb2 as pb

__all__ = [
    "Compare",
    "CompareOp",
    "Key",
    "Op",
    "delete_request",
    "prefix_range_end",
    "put_request",
    "range_request",
    "to_bytes",
]

Key = bytes | str
CompareOp = Literal["==", "!=", "<", ">"]

_COMPARE_RESULT = {
    "==": pb.Compare.EQUAL,
    "!=": pb.Compare.NOT_EQUAL,
    "<": pb.Compare.LESS,
    ">": pb.Compare.GREATER,
}


def to_bytes(value: Key) -> bytes:
    """A key or value as etcd stores it (``str`` as UTF-8)."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def prefix_range_end(prefix: Key) -> bytes:
    """Return the ``range_end`` that selects every key starting with ``prefix``.

    The last byte that is not 0xff is incremented and the rest dropped
    (``b"a/" -> b"a0"``, ``b"a\\xff" -> b"b"``). An empty or all-0xff prefix gives
    ``b"\\x00"``, which etcd reads as "every key >= key".
    """
    p = bytearray(to_bytes(prefix))
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return b"\x00"


def range_request(
    key: Key,
    range_end: Key = b"",
    *,
    keys_only: bool = False,
    max_create_revision: int = 0,
    newest: int = 0,
) -> pb.RangeRequest:
    """A read of ``key``, or of the keys in ``[key, range_end)`` in key order.

    ``keys_only`` leaves the values out; ``max_create_revision`` keeps only the keys
    created at or before that revision (the response's ``count`` ignores it).
    ``newest``: only the ``newest`` most recently created keys, newest first (by
    create_revision); the response's ``more`` says whether older keys were left out.
    """
    if newest < 0:
        raise ValueError(f"newest must be >= 0, not {newest}")
    request = pb.RangeRequest(
        key=to_bytes(key),
        range_end=to_bytes(range_end),
        keys_only=keys_only,
        max_create_revision=max_create_revision,
    )
    if newest:
        request.limit = newest
        request.sort_order = pb.RangeRequest.DESCEND
        request.sort_target = pb.RangeRequest.CREATE
    return request


def put_request(
    key: Key, value: Key, *, lease: int = 0, ignore_lease: bool = False
) -> pb.PutRequest:
    """A write of ``key``; with ``lease`` the key is deleted when the lease ends; with
    ``ignore_lease`` it keeps the lease it has (a write by another session)."""
    return pb.PutRequest(
        key=to_bytes(key), value=to_bytes(value), lease=lease, ignore_lease=ignore_lease
    )


def delete_request(key: Key, range_end: Key = b"") -> pb.DeleteRangeRequest:
    """A delete of ``key``, or of the keys in ``[key, range_end)``."""
    return pb.DeleteRangeRequest(key=to_bytes(key), range_end=to_bytes(range_end))


class Compare:
    """Transaction guards: ``Compare.create_revision(key, "==", 0)`` ("``key`` does not
    exist"), or ``== token`` ("the entry created at revision ``token`` is still there")."""

    @staticmethod
    def create_revision(key: Key, op: CompareOp, revision: int) -> pb.Compare:
        """Compare the key's create_revision (0 when the key does not exist)."""
        return pb.Compare(
            result=_COMPARE_RESULT[op],
            target=pb.Compare.CREATE,
            key=to_bytes(key),
            create_revision=revision,
        )

    @staticmethod
    def mod_revision(key: Key, op: CompareOp, revision: int) -> pb.Compare:
        """Compare the revision of the key's last write (0 when it does not exist)."""
        return pb.Compare(
            result=_COMPARE_RESULT[op],
            target=pb.Compare.MOD,
            key=to_bytes(key),
            mod_revision=revision,
        )

    @staticmethod
    def value(key: Key, op: CompareOp, value: Key) -> pb.Compare:
        """Compare the key's value (a key that does not exist fails ``==``)."""
        return pb.Compare(
            result=_COMPARE_RESULT[op],
            target=pb.Compare.VALUE,
            key=to_bytes(key),
            value=to_bytes(value),
        )


class Op:
    """The operations of a transaction branch (also what a fenced transaction's
    ``add()`` takes)."""

    @staticmethod
    def put(key: Key, value: Key, *, lease: int = 0, ignore_lease: bool = False) -> pb.RequestOp:
        """A put; see :func:`put_request`."""
        return pb.RequestOp(
            request_put=put_request(key, value, lease=lease, ignore_lease=ignore_lease)
        )

    @staticmethod
    def range(key: Key, range_end: Key = b"", *, limit: int = 0) -> pb.RequestOp:
        """A range (see :func:`range_request`), of the first ``limit`` keys in key order
        (0: all; the reply's ``more`` says whether some were left out); inside a txn it
        sees the writes of earlier ops of the same branch."""
        request = range_request(key, range_end)
        request.limit = limit
        return pb.RequestOp(request_range=request)

    @staticmethod
    def delete(key: Key, range_end: Key = b"") -> pb.RequestOp:
        """A delete of ``key`` (or of ``[key, range_end)``)."""
        return pb.RequestOp(request_delete_range=delete_request(key, range_end))

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
