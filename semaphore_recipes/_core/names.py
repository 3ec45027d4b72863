"""Names, paths and keys: validation and the encoding of queue entries.

Everything the library builds from user input goes through here, so one property
test can show that no name ever escapes its root.
"""

from __future__ import annotations

import re
import uuid

from ..errors import CorruptState, InvalidName
from .shown import quoted

#: an optional leading hash tag ``{group}`` (Redis Cluster keeps a group's semaphores in
#: one slot, so ``acquire_all`` spans them; elsewhere the braces are characters)
NAME_PATTERN = re.compile(r"(?=.{1,128}$)(\{[A-Za-z0-9._-]{1,64}\})?[A-Za-z0-9._-]*", re.DOTALL)
_ROOT_SEGMENT = re.compile(r"[A-Za-z0-9._-]{1,255}")

#: ZooKeeper entry node names: ``e-<uuid hex>-w<weight>-`` plus the 10-digit suffix
#: that ZooKeeper appends to sequential nodes.
ENTRY_PREFIX = "e-"
_ZK_ENTRY = re.compile(r"e-([0-9a-f]{32})-w([1-9][0-9]{0,9})-(-?[0-9]{10})")
_ENTRY_ID = re.compile(r"[0-9a-f]{32}")
_ETCD_ENTRY = re.compile(r"([1-9a-f][0-9a-f]{0,15})-(0|[1-9][0-9]{0,8})")


def validate_name(name: object) -> str:
    """Return ``name`` if it is a valid semaphore name, else raise InvalidName."""
    if not isinstance(name, str):
        raise InvalidName(f"semaphore name must be a str, not {type(name).__name__}")
    if not NAME_PATTERN.fullmatch(name) or name in (".", ".."):
        raise InvalidName(
            f"invalid semaphore name {quoted(name)}: use 1-128 characters from "
            "A-Z a-z 0-9 . _ - (not '.' or '..'), optionally starting with a hash tag "
            "{group}"
        )
    return name


def validate_root(root: object) -> str:
    """Normalise a root path (``/a/b``; ``/`` allowed) or raise InvalidName."""
    if not isinstance(root, str):
        raise InvalidName(f"root must be a str, not {type(root).__name__}")
    if not root.startswith("/"):
        raise InvalidName(f"root {quoted(root)} must start with '/'")
    segments = [s for s in root.split("/") if s]
    for seg in segments:
        if not _ROOT_SEGMENT.fullmatch(seg) or seg in (".", ".."):
            raise InvalidName(f"invalid segment {quoted(seg)} in root {quoted(root)}")
    if root.rstrip("/") != "/" + "/".join(segments) and root != "/":
        raise InvalidName(f"root {quoted(root)} has empty segments")
    return "/" + "/".join(segments)


#: The largest capacity, and so the most permits one acquire may ask, on every backend.
#: It fits the ZooKeeper entry name's weight field (at most 10 digits, which clients
#: already deployed parse), a signed 32-bit integer and any JSON decoder's exact range.
MAX_CAPACITY = 10**9


def validate_capacity(capacity: object) -> int:
    """Return ``capacity`` if it is an int from 1 to MAX_CAPACITY, else raise
    TypeError/ValueError."""
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(f"capacity must be an int, not {capacity!r}")
    if not 1 <= capacity <= MAX_CAPACITY:
        raise ValueError(f"capacity must be at least 1 and at most {MAX_CAPACITY}, not {capacity}")
    return capacity


def validate_open_capacity(capacity: object, create: bool) -> int | None:
    """The ``capacity`` of ``backend.semaphore()``: needed to create; optional (None: the
    stored one) when only opening an existing semaphore (``create=False``)."""
    if capacity is None:
        if create:
            raise TypeError(
                "capacity is needed to create a semaphore; "
                "pass create=False to open an existing one with its stored capacity"
            )
        return None
    return validate_capacity(capacity)


def validate_permits(permits: object, capacity: int) -> int:
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise TypeError(f"permits must be an int, not {permits!r}")
    if not 1 <= permits <= min(capacity, MAX_CAPACITY):
        raise ValueError(
            f"permits must be at least 1 and at most the capacity {capacity} "
            f"(and at most {MAX_CAPACITY}), not {permits}"
        )
    return permits


def new_entry_id() -> str:
    """A fresh unique id for one queue entry (finds the entry again after a lost reply)."""
    return uuid.uuid4().hex


def join_path(root: str, *parts: str) -> str:
    """Join ZooKeeper path parts under ``root``; every part must be a validated name."""
    base = root.rstrip("/")
    return base + "".join("/" + p for p in parts)


def zk_entry_prefix(entry_id: str, weight: int) -> str:
    """The node name given to ZooKeeper's sequential create (it appends the sequence)."""
    if not _ENTRY_ID.fullmatch(entry_id) or weight < 1:
        raise ValueError(f"bad entry id {entry_id!r} or weight {weight}")
    return f"{ENTRY_PREFIX}{entry_id}-w{weight}-"


def parse_zk_entry(node: str) -> tuple[str, int, int] | None:
    """``(entry_id, weight, sequence)`` of an entry node name; None for other children.

    A child that starts like an entry but does not parse is CorruptState: guessing its
    weight could over-admit, and ignoring it could too.
    """
    if not node.startswith(ENTRY_PREFIX):
        return None
    m = _ZK_ENTRY.fullmatch(node)
    if m is None:
        raise CorruptState(f"unreadable queue entry name {node!r}")
    return m.group(1), int(m.group(2)), int(m.group(3))


#: A ZooKeeper slot record's node name, beside the entries (``+`` is in no entry or
#: data key name, and a second ``+`` keeps it apart from ``data_key(name, "slot-1")``)
ZK_SLOT_PREFIX = "+slot+"


def zk_slot_name(index: int) -> str:
    return f"{ZK_SLOT_PREFIX}{index}"


def parse_slot_index(name: str, prefix: str) -> int | None:
    """The index of a slot record named ``<prefix><index>`` (None: not one)."""
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix) :]
    return int(digits) if digits.isdigit() and digits.isascii() else None


def etcd_entry_key(lease_id: int, slot: int) -> str:
    """The key, under a semaphore's ``entries/``, of an etcd entry: ``<lease hex>-<slot>``."""
    return f"{lease_id:x}-{slot}"


def parse_etcd_entry(key: str) -> tuple[int, int]:
    """``(lease_id, slot)`` of an etcd entry key (the part under ``entries/``).

    Any other key under ``entries/`` is CorruptState, as with ZooKeeper's entry names:
    the library never writes one, and counting or skipping it could both over-admit.
    """
    m = _ETCD_ENTRY.fullmatch(key)
    if m is None:
        raise CorruptState(f"unreadable queue entry key {key!r}")
    return int(m.group(1), 16), int(m.group(2))
