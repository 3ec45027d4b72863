"""Where a waiting acquire stands in its queue (``acquire(on_position=...)``).

A waiter's own view cannot tell it: it keeps only its nearest lower entries (a view far
back is truncated, docs/design.md "Truncated views"), and on a store that decides
admission itself (Redis, SQL) it holds no view at all. A :class:`Position` is therefore
computed from a status read of the whole queue, made only for an acquire that asks, so
every figure in it is exact as of that read.
"""

from __future__ import annotations

from dataclasses import dataclass

from .status import Status


@dataclass(frozen=True)
class Position:
    """A waiting acquire's place, as of one read of its queue.

    ``entries_ahead``: waiting entries queued before ours; ``permits_ahead``: the
    permits they ask; ``holders``: entries holding permits now; ``permits_held``:
    what they hold, of ``capacity``; ``waited``: seconds since the acquire began.
    Ours is admitted once the entries ahead are, and our permits fit beside what the
    holders then hold (FIFO: nobody behind us goes first).
    """

    entries_ahead: int
    permits_ahead: int
    holders: int
    permits_held: int
    capacity: int
    waited: float

    def describe(self) -> str:
        """One line for people: ``2 waiting ahead (3 permits), 3 holders (3/3 permits)``."""
        ahead = (
            f"{self.entries_ahead} waiting ahead ({_permits(self.permits_ahead)})"
            if self.entries_ahead
            else "next in line"
        )
        return (
            f"{ahead}, {self.holders} holder{'' if self.holders == 1 else 's'} "
            f"({self.permits_held}/{self.capacity} permits)"
        )

    def same_place(self, other: Position | None) -> bool:
        """The same position, whatever the time waited."""
        return other is not None and (
            self.entries_ahead,
            self.permits_ahead,
            self.holders,
            self.permits_held,
            self.capacity,
        ) == (
            other.entries_ahead,
            other.permits_ahead,
            other.holders,
            other.permits_held,
            other.capacity,
        )


def position_in(status: Status, token: int, waited: float) -> Position | None:
    """The position of the waiting entry with fencing token ``token`` in ``status``;
    None when it is not among the waiters (admitted meanwhile, or gone)."""
    for index, entry in enumerate(status.waiters):
        if entry.token == token:
            ahead = status.waiters[:index]
            return Position(
                entries_ahead=len(ahead),
                permits_ahead=sum(e.permits for e in ahead),
                holders=len(status.holders),
                permits_held=status.used,
                capacity=status.capacity,
                waited=waited,
            )
    return None


def _permits(n: int) -> str:
    return f"{n} permit" + ("" if n == 1 else "s")
