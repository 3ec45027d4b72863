"""Revoking holders, as a program both faces run (``Semaphore.revoke``,
``AsyncSemaphore.revoke``, ``semaphore-recipes revoke``).

The program reads the status, picks the holders asked for (one token, one owner, or
all), and writes a revoke request on each one's entry (``QueueDriver.request_revoke``):
a holder that watches its entry (``acquire(watch_entry=True)``) sees
``permit.revoke_requested`` set. With ``force``, after ``grace`` seconds it reads the
status again and removes each picked entry still there with the same token
(``QueueDriver.remove_revoked``), as a session's end would: the old holder's fence
fails, its ``lost`` fires, and the next waiters are admitted in queue order. A store
that cannot be reached makes a request raise BackendUnavailable within the request
timeout; what was written before stays (a request on an entry is harmless).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass

from ._core.status import EntryStatus, Status
from ._drain import Pause, StoreRun
from .backend import Backend, Capability, QueueDriver

#: ``revoke(grace=...)`` when not given: the seconds a forced revoke waits
DEFAULT_GRACE = 10.0


@dataclass(frozen=True)
class RevokeTarget:
    """Which holders a revoke asks: exactly one of ``token``, ``owner`` or ``every``."""

    token: int | None = None
    owner: str | None = None
    every: bool = False

    def picks(self, holder: EntryStatus) -> bool:
        if self.every:
            return True
        if self.token is not None:
            return holder.token == self.token
        return holder.owner == self.owner

    def __str__(self) -> str:
        if self.every:
            return "every holder"
        if self.token is not None:
            return f"the holder of token {self.token}"
        return f"the holders of owner {self.owner!r}"


@dataclass(frozen=True)
class Revoked:
    """What a revoke did: ``asked``, the holders whose entries got the request;
    ``removed``, the entries a forced revoke removed after the grace (0 without)."""

    asked: int
    removed: int = 0


def revoke_target(
    token: object = None, owner: object = None, every: object = False
) -> RevokeTarget:
    """The target named by the caller's arguments: TypeError/ValueError unless exactly
    one of them is given and well typed (before any I/O)."""
    given = [token is not None, owner is not None, every is not False]
    if sum(given) != 1:
        raise ValueError("revoke takes exactly one of token=, owner= or all=True")
    if token is not None and (isinstance(token, bool) or not isinstance(token, int)):
        raise TypeError(f"token must be an int, not {type(token).__name__}")
    if owner is not None and (not isinstance(owner, str) or not owner):
        raise TypeError("owner must be a non-empty str")
    if every is not False and every is not True:
        raise TypeError("all must be True or False")
    return RevokeTarget(token=token, owner=owner, every=every)


def validate_grace(grace: object) -> float:
    """``grace`` as seconds: TypeError/ValueError unless a finite number >= 0."""
    if isinstance(grace, bool) or not isinstance(grace, (int, float)):
        raise TypeError(f"grace must be a number of seconds, not {type(grace).__name__}")
    if not math.isfinite(grace) or grace < 0:
        raise ValueError(f"grace must be a finite number of seconds >= 0, not {grace!r}")
    return float(grace)


def require_revoke(backend: Backend) -> None:
    """NotSupported before any I/O when the store cannot revoke."""
    backend.capabilities.require(backend.scheme, Capability.REVOKE)


def revoking(
    store: QueueDriver, target: RevokeTarget, force: bool, grace: float
) -> Generator[StoreRun | Pause, object, Revoked]:
    """Ask the holders ``target`` picks; with ``force``, remove those still holding with
    the same token after ``grace`` seconds."""
    status = yield StoreRun(store.status())
    assert isinstance(status, Status)
    picked = [holder for holder in status.holders if target.picks(holder)]
    asked: list[EntryStatus] = []
    for holder in picked:
        if (yield StoreRun(store.request_revoke(holder.key, holder.token))):
            asked.append(holder)
    if not (force and asked):
        return Revoked(len(asked))
    if grace > 0:
        yield Pause(grace)
    status = yield StoreRun(store.status())
    assert isinstance(status, Status)
    left = {(entry.key, entry.token) for entry in (*status.holders, *status.waiters)}
    removed = 0
    for holder in asked:
        if (holder.key, holder.token) in left and (
            yield StoreRun(store.remove_revoked(holder.key, holder.token))
        ):
            removed += 1
    return Revoked(len(asked), removed)
