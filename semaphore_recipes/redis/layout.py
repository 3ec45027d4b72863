"""Where a semaphore's keys live: the key prefix its scripts are given.

Every script builds its keys from the prefix it is given first (:mod:`.scripts`): the
semaphore's ``P:s:S:...`` keys, the client's lease ``P:lease:<id>`` and inbox
``P:inbox:<id>``, and the counter ``P:seq``. On one primary (or through Sentinel)
that prefix is the URL's, the same for every semaphore: one lease, one inbox, one
counter per client. On Redis Cluster a script may touch only keys of one hash slot,
so the prefix carries the semaphore's hash tag, ``P:{T}``: the semaphore's keys, and
the lease, inbox and counter its scripts read, all hash to ``T``'s slot. ``T`` is the
name's leading ``{group}`` when it has one (the semaphores of a group share a slot,
and ``acquire_all`` spans them), else the whole name. A client then keeps a lease and
an inbox in each slot it uses, and tokens grow per tag rather than store-wide.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import NotSupported

__all__ = ["SLOTS", "KeyLayout", "hash_tag", "key_slot"]

#: Redis Cluster's hash slots
SLOTS = 16384


def hash_tag(name: str) -> str:
    """The part of a (valid) semaphore name that Redis Cluster hashes: its leading
    ``{group}``'s group, else the whole name."""
    if name.startswith("{"):
        return name[1 : name.index("}")]
    return name


def key_slot(key: str) -> int:
    """The hash slot of ``key`` (CRC16 of its hash tag, or of the whole key), as
    Redis Cluster computes it."""
    data = key.encode()
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % SLOTS


@dataclass(frozen=True)
class KeyLayout:
    """The key prefix of each semaphore: ``prefix`` itself, or with ``clustered``
    ``prefix:{tag}`` (:func:`hash_tag`)."""

    prefix: str
    clustered: bool

    def of(self, name: str) -> str:
        """The prefix that semaphore ``name``'s scripts are given."""
        if not self.clustered:
            return self.prefix
        return f"{self.prefix}:{{{hash_tag(name)}}}"

    def of_all(self, names: Iterable[str]) -> str:
        """The one prefix of semaphores ``names`` taken in one script (``acquire_all``):
        on Redis Cluster they must share a hash tag (NotSupported names the groups,
        before any I/O)."""
        found = {name: self.of(name) for name in names}
        prefixes = set(found.values())
        if len(prefixes) != 1:
            groups = ", ".join(f"{name!r}: {{{hash_tag(name)}}}" for name in found)
            raise NotSupported(
                "redis+cluster",
                "take semaphores of different hash slots in one acquire_all: give their "
                f"names one leading hash tag, e.g. '{{jobs}}a' and '{{jobs}}b' ({groups})",
                "acquire_all",
            )
        return prefixes.pop()

    def check_keys(self, name: str, keys: Iterable[str]) -> None:
        """On Redis Cluster a fenced write reaches only keys of its semaphore's slot:
        ValueError naming the first other one, before any I/O."""
        if not self.clustered:
            return
        slot = key_slot(self.of(name))
        for key in keys:
            if key_slot(key) != slot:
                raise ValueError(
                    f"on Redis Cluster a fenced write of semaphore {name!r} reaches only "
                    f"keys of its hash slot, and {key!r} is in another: use "
                    f"backend.data_key({name!r}, ...), or put {{{hash_tag(name)}}} in "
                    "the key"
                )

    def is_global(self) -> bool:
        """One prefix for every semaphore (one lease, one inbox, one counter)."""
        return not self.clustered
