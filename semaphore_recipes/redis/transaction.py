"""Fenced transactions on Redis: one script checks the entry and its lease, then writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..backend import FencedTransaction, Program
from ..errors import BackendUnavailable, PermitLost, WriteConflict
from .calls import Arg
from .scripts import ScriptName

if TYPE_CHECKING:
    from .queue import RedisQueue


class RedisFencedTransaction(FencedTransaction):
    """Writes applied all or none by one script, only while the permit's entry is
    there with its token, held, and its lease alive.

    Keys are plain Redis keys (``backend.data_key`` gives one kept with the semaphore);
    on Redis Cluster only keys of the semaphore's hash slot (ValueError before any I/O).
    A commit whose reply is lost is not sent again (it may have been applied):
    BackendUnavailable, read back before committing again. With ``wait_replicas=N`` a
    commit returns once N replicas have its writes (``WAIT`` on the same connection),
    as a grant does; fewer within the request timeout: BackendUnavailable (the writes
    are on the primary, and a failover may lose them).
    """

    def __init__(
        self,
        queue: RedisQueue,
        entry_key: str,
        token: int,
        others: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(queue.backend)
        self._queue = queue
        self.entry_key = entry_key
        self.token = token
        #: (semaphore, entry id) of a multi-permit's other entries, fenced as well
        self.others = tuple(others)

    def apply(self) -> Program[None]:
        """Apply the writes: PermitLost when the fence fails, WriteConflict when a
        write's condition fails (nothing is written), BackendUnavailable when no reply
        came within the request timeout."""
        queue = self._queue
        queue.backend.layout.check_keys(queue.name, (write.key for write in self.writes))
        writes: list[Arg] = []
        for write in self.writes:
            writes += [write.kind.value, write.key, write.value]
        replicas = queue.backend.params.wait_replicas
        keys = ", ".join(write.key for write in self.writes)
        if not self.others:
            args: tuple[Arg, ...] = (queue.prefix, queue.name, self.entry_key, self.token)
            where = f"keys {keys} of semaphore {queue.name!r} on {queue.backend.describe()}"
            script = ScriptName.FENCE
        else:
            entries: list[Arg] = [queue.name, self.entry_key]
            for name, key in self.others:
                entries += [name, key]
            args = (queue.prefix, "", self.token, len(entries) // 2, *entries)
            where = f"keys {keys} of semaphores {queue.name!r} and others on "
            where += queue.backend.describe()
            script = ScriptName.FENCE_ALL
        reply = yield from queue.backend.script(
            script, (*args, *writes), where, retry=False, replicas=replicas
        )
        acknowledged = replicas
        if replicas:
            reply, acknowledged = reply
        outcome = reply[0]
        if outcome == b"lost":
            raise PermitLost(
                f"semaphore {self._queue.name!r}: the permit's entry {self.entry_key} "
                f"{'(or another of its entries) ' if self.others else ''}"
                "is gone or its lease expired; nothing was written"
            )
        if outcome == b"conflict":
            key = reply[1].decode()
            raise WriteConflict(
                key,
                "its condition failed (create of a key that exists, or "
                "set/delete of one that does not); nothing was written",
            )
        if acknowledged < replicas:
            raise BackendUnavailable(
                f"semaphore {queue.name!r}: the fenced writes reached {acknowledged} of the "
                f"{replicas} replica(s) wait_replicas asks for; they are on the primary, "
                "which a failover may lose"
            )
