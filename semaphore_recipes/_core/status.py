"""Who holds and who waits, from a listing of the whole queue."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .ramp import RampPlan


@dataclass(frozen=True)
class EntryStatus:
    """One queue entry as ``status()`` shows it.

    ``key``: the entry's node name (ZooKeeper) or ``<lease>-<slot>`` id (etcd);
    ``owner``: its backend's owner string; ``permits``: its weight; ``token``: its
    fencing token; ``held``: its held mark was written; ``since``: Unix time of that
    mark, or of the enqueue while it is not marked (the writer's clock); ``slots``: the
    job slots it holds (``acquire(slot=True)``), lowest first; empty without;
    ``revoke_requested``: someone asked its holder to give the permits back
    (``Semaphore.revoke``).
    """

    key: str
    owner: str
    permits: int
    token: int
    held: bool
    since: float
    slots: tuple[int, ...] = ()
    revoke_requested: bool = False


@dataclass(frozen=True)
class Status:
    """A snapshot of one semaphore: ``holders`` and ``waiters`` in queue order;
    ``draining``: new acquires are refused (``drain()``) while the holders finish;
    ``ramp``: the capacity ramp under way, if any (``set_capacity(n, ramp=...)``);
    ``config_version``: the store version of the config read (capacity, flag, ramp;
    -1 where a store does not tell it), what a ramp step compares before writing."""

    name: str
    capacity: int
    holders: tuple[EntryStatus, ...]
    waiters: tuple[EntryStatus, ...]
    draining: bool = False
    ramp: RampPlan | None = None
    config_version: int = -1

    @property
    def used(self) -> int:
        """Permits taken by the holders."""
        return sum(e.permits for e in self.holders)


def split_queue(
    name: str,
    capacity: int,
    entries: Iterable[EntryStatus],
    *,
    draining: bool = False,
    ramp: RampPlan | None = None,
    config_version: int = -1,
) -> Status:
    """Entries in queue order -> holders (marked held, or inside the admitted prefix) and
    waiters. An admitted entry whose held mark is still in flight counts as a holder."""
    holders: list[EntryStatus] = []
    waiters: list[EntryStatus] = []
    prefix = 0
    for e in entries:
        prefix += e.permits
        if e.held or (not waiters and prefix <= capacity):
            holders.append(e)
        else:
            waiters.append(e)
    return Status(
        name=name,
        capacity=capacity,
        holders=tuple(holders),
        waiters=tuple(waiters),
        draining=draining,
        ramp=ramp,
        config_version=config_version,
    )
