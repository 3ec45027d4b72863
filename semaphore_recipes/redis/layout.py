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

__all__ = ["KeyLayout", "hash_tag"]


def hash_tag(name: str) -> str:
    """The part of a (valid) semaphore name that Redis Cluster hashes: its leading
    ``{group}``'s group, else the whole name."""
    if name.startswith("{"):
        return name[1 : name.index("}")]
    return name


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

    def is_global(self) -> bool:
        """One prefix for every semaphore (one lease, one inbox, one counter)."""
        return not self.clustered
