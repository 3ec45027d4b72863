"""The entry's create and delete, built from a template (:mod:`semaphore_recipes.etcd.
entry_txns`), are the requests the op-by-op builders make, byte for byte: with and
without the listing, reused templates included, guarded or not."""

from __future__ import annotations

import pytest

from semaphore_recipes.etcd._proto import etcd_api_pb2 as pb
from semaphore_recipes.etcd.entry_txns import EntryCreates, entry_delete
from semaphore_recipes.etcd.ops import Compare, Op, prefix_range_end

PREFIX = b"/sr/seats/entries/"
CONFIG = b"/sr/seats/config"


def op_by_op(key: bytes, value: bytes, lease: int, listed: int) -> pb.TxnRequest:
    success = [Op.put(key, value, lease=lease), Op.range(CONFIG)]
    if listed:
        success.insert(1, Op.range(PREFIX, prefix_range_end(PREFIX), limit=listed))
    return pb.TxnRequest(
        compare=[Compare.create_revision(key, "==", 0)],
        success=success,
        failure=[Op.range(key), Op.range(CONFIG)],
    )


@pytest.mark.parametrize("listed", [0, 12])
def test_an_entry_create_is_the_op_by_op_txn(listed: int) -> None:
    creates = EntryCreates(PREFIX, prefix_range_end(PREFIX), CONFIG)
    # twice each: the second is filled in from the template the first made
    for uid, value, lease in [(b"7a-0", b'{"held":false}', 0x7A), (b"7a-1", b"{}", 0x7B)] * 2:
        key = PREFIX + uid
        made = creates.request(key, value, lease, listed)
        expected = op_by_op(key, value, lease, listed)
        assert made.SerializeToString() == expected.SerializeToString()
    # a request sent is its own: filling in the next one leaves it as it was
    first = creates.request(PREFIX + b"1-0", b"a", 1, listed)
    creates.request(PREFIX + b"2-0", b"b", 2, listed)
    assert (
        first.SerializeToString() == op_by_op(PREFIX + b"1-0", b"a", 1, listed).SerializeToString()
    )


@pytest.mark.parametrize("token", [None, 0, 41])
def test_an_entry_delete_is_the_op_by_op_txn(token: int | None) -> None:
    key = PREFIX + b"7a-3"
    guard = [] if token is None else [Compare.create_revision(key, "==", token)]
    expected = pb.TxnRequest(compare=guard, success=[Op.delete(key)], failure=[])
    assert entry_delete(key, token).SerializeToString() == expected.SerializeToString()
