"""Validation, naming, deadlines and stored-data decoding."""

from __future__ import annotations

import math
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semaphore_recipes._core import codec, names
from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes._core.status import EntryStatus, split_queue
from semaphore_recipes.errors import CorruptState, InvalidName


@pytest.mark.parametrize(
    "bad", ["", ".", "..", "a/b", "/a", "a\x00b", "x" * 129, "ä", "a b", "a\nb", 5, None, b"a"]
)
def test_bad_names_are_refused(bad: object) -> None:
    with pytest.raises(InvalidName):
        names.validate_name(bad)


@given(st.text(max_size=200))
def test_a_valid_name_never_escapes_its_root(name: str) -> None:
    try:
        names.validate_name(name)
    except InvalidName:
        return
    for root in ("/semaphore_recipes", "/", "/a/b"):
        path = names.join_path(root, name)
        assert posixpath.normpath(path) == path
        assert posixpath.dirname(path) == root.rstrip("/") or (root == "/" and path == "/" + name)


@pytest.mark.parametrize("bad", ["", "a", "/a/../b", "/a//b", "/a/./b", "/a b"])
def test_bad_roots_are_refused(bad: str) -> None:
    with pytest.raises(InvalidName):
        names.validate_root(bad)


def test_roots_are_normalised() -> None:
    assert names.validate_root("/x/y/") == "/x/y"
    assert names.validate_root("/") == "/"


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "3"])
def test_bad_capacities(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        names.validate_capacity(bad)


@pytest.mark.parametrize("bad", [0, -1, 4, True, 2.0])
def test_bad_permits(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        names.validate_permits(bad, 3)


def test_one_maximum_for_capacity_and_permits() -> None:
    top = names.MAX_CAPACITY
    assert names.validate_capacity(top) == top
    assert names.validate_permits(top, top) == top
    for too_big in (top + 1, 10**10, 2**70):
        with pytest.raises(ValueError, match=f"at most {top}"):
            names.validate_capacity(too_big)
        # a capacity stored above the maximum (by hand) does not lift it
        with pytest.raises(ValueError, match=f"at most {top}"):
            names.validate_permits(too_big, too_big)
    # every weight up to the maximum fits the ZooKeeper entry name and parses back
    node = names.zk_entry_prefix(names.new_entry_id(), top) + "0000000001"
    assert names.parse_zk_entry(node) is not None
    assert names.parse_zk_entry(node)[1] == top  # type: ignore[index]


@given(st.integers(1, 10**9), st.integers(0, 9_999_999_999))
def test_entry_names_round_trip(weight: int, seq: int) -> None:
    uid = names.new_entry_id()
    node = names.zk_entry_prefix(uid, weight) + f"{seq:010d}"
    assert names.parse_zk_entry(node) == (uid, weight, seq)


def test_foreign_children_and_corrupt_entries() -> None:
    assert names.parse_zk_entry("lock") is None
    with pytest.raises(CorruptState):
        names.parse_zk_entry("e-zzz-w1-0000000001")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b'{"capacity": 0}',
        b'{"capacity": "3"}',
        b'{"cap": 3}',
        b'{"capacity": true}',
    ],
)
def test_corrupt_capacity(raw: bytes) -> None:
    with pytest.raises(CorruptState):
        codec.decode_capacity("s", raw)


def test_capacity_round_trip() -> None:
    assert codec.decode_capacity("s", codec.encode_capacity(7)) == 7


def test_entry_data_round_trip_and_corruption() -> None:
    d = codec.EntryData(owner="host:1", held=True, since=12.5, weight=2)
    assert codec.decode_entry("k", d.encode()) == d
    for raw in (
        b"",
        b"{}",
        b'{"owner": 1, "held": true, "since": 1}',
        b'{"owner": "o", "held": 1, "since": 1}',
    ):
        with pytest.raises(CorruptState):
            codec.decode_entry("k", raw)


def test_deadline_uses_the_injected_clock() -> None:
    now = [100.0]
    d = Deadline(5.0, clock=lambda: now[0])
    assert d.remaining() == 5.0 and not d.expired()
    now[0] = 104.0
    assert d.remaining() == pytest.approx(1.0)
    assert d.cap(10.0) == pytest.approx(1.0)
    now[0] = 106.0
    assert d.remaining() == 0.0 and d.expired()
    forever = Deadline(None, clock=lambda: now[0])
    assert forever.remaining() is None and not forever.expired() and forever.cap(3) == 3


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "1", True])
def test_bad_timeouts(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        Deadline(bad, clock=lambda: 0.0)  # type: ignore[arg-type]


def test_split_queue_counts_in_flight_admissions_as_holders() -> None:
    def e(k: str, w: int, held: bool) -> EntryStatus:
        return EntryStatus(key=k, owner="o", permits=w, token=1, held=held, since=0.0)

    st_ = split_queue(
        "s", 3, [e("a", 1, True), e("b", 2, False), e("c", 1, False), e("d", 1, True)]
    )
    assert [x.key for x in st_.holders] == ["a", "b", "d"]
    assert [x.key for x in st_.waiters] == ["c"]
    assert st_.used == 4


def test_an_entry_revoke_request_round_trips_and_is_absent_when_not_set() -> None:
    plain = codec.EntryData(owner="o", held=True, since=1.0, weight=2)
    assert b"revoke" not in plain.encode()  # an entry never revoked reads as before
    asked = codec.EntryData(owner="o", held=True, since=1.0, weight=2, revoke=True)
    assert codec.decode_entry("k", asked.encode()) == asked
    assert codec.decode_entry("k", plain.encode()).revoke is False
    with pytest.raises(CorruptState):
        codec.decode_entry("k", b'{"owner":"o","held":true,"since":1,"revoke":"yes"}')
