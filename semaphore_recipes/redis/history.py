"""Telling that a Redis data set's history went back behind this client.

Every order, fencing token and capacity version comes from one counter (``P:seq``),
which only grows while the data set lives. A server that restarted without persistence
(empty), that was flushed, or a replica promoted before it had the latest writes, has a
counter lower than one this client saw: tokens will be handed out again. The lease
keeper notes the counter with each renewal (the RENEW script returns it:
:meth:`StoreHistory.note_counter`), as does each enqueue (an entry's order is a counter
value), and the run id once, after its first renewal
(:meth:`StoreHistory.note`: nothing else is sent on the keeper's path, whose timing tells a
cut connection; a read before the first renewal hung there when the network was cut)
and, when it finds its lease gone, asks :meth:`StoreHistory.went_back` before making a
new one: a counter lower than the highest noted, or none at all on a server whose
``run_id`` (``INFO server``, where the ACL allows it) changed, tells the data set is not
the one the lease was made in. A renewal that works can tell it too
(:meth:`StoreHistory.behind`): after a failover the lease may have reached the promoted
replica while later grants did not, and its counter is then lower than one noted before
the renewal was sent (on one primary the counter a renewal reads is never lower than one
read before it). A failover to a replica that has everything changes the run id but not
the counter: the data set goes on.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import redis

__all__ = ["StoreHistory"]


class StoreHistory:
    """The highest counter value and the server's run id this client has seen."""

    def __init__(self, prefix: str) -> None:
        self.counter_key = f"{prefix}:seq"
        self._lock = threading.Lock()
        self.counter = 0
        self.run_id: str | None = None

    def note(self, client: Any) -> None:
        """Note the counter now (and, the first time, the server's run id); a failure
        to read is ignored (the next renewal notes again)."""
        counter = _counter(client, self.counter_key)
        run_id = _run_id(client) if self.run_id is None else None
        with self._lock:
            if counter is not None:
                self.counter = max(self.counter, counter)
            if self.run_id is None:
                self.run_id = run_id

    def note_counter(self, counter: int) -> None:
        """Note the counter a renewal read (no I/O)."""
        with self._lock:
            self.counter = max(self.counter, counter)

    def behind(self, counter: int, seen: int, where: str) -> str | None:
        """Why the data set went back, in words, when a renewal read ``counter`` below
        ``seen`` (the highest noted before the renewal was sent); else None."""
        if counter >= seen:
            return None
        what = f"its counter {self.counter_key} is {counter}, lower than the {seen} seen"
        return _reason(where, "", what)

    def went_back(self, client: Any, where: str) -> str | None:
        """Why the data set has a history older than the one this client knew, in
        words; None when it has not (or it cannot be read now)."""
        counter = _counter(client, self.counter_key)
        if counter is None:
            return None
        with self._lock:
            seen, known_run = self.counter, self.run_id
        run_id = _run_id(client)
        restarted = ""
        if known_run and run_id and run_id != known_run:
            restarted = f"the server restarted (run id {run_id}, was {known_run}) and "
        # lower than seen; or none at all after a restart: the lease that was there
        # (this client's, found gone) went with the rest of the data
        if not (counter < seen or (restarted and counter == 0)):
            return None
        if counter < seen:
            what = f"its counter {self.counter_key} is {counter}, lower than the {seen} seen"
        else:
            what = f"its counter {self.counter_key} is gone"
        return _reason(where, restarted, what)


def _reason(where: str, restarted: str, what: str) -> str:
    return (
        f"the Redis store's history restarted ({where}): {restarted}{what} "
        "(it restarted without persistence, was flushed, or a replica that lacked the "
        "latest writes took over); every lease, entry and fencing token of before is "
        "gone (tokens are handed out again: reset a fence that kept them, "
        "docs/operations.md); open a new backend"
    )


def _counter(client: Any, key: str) -> int | None:
    with contextlib.suppress(redis.exceptions.RedisError, ValueError):
        raw = client.get(key)
        return int(raw or 0)
    return None


def _run_id(client: Any) -> str | None:
    with contextlib.suppress(redis.exceptions.RedisError):  # (an ACL may refuse INFO)
        return str(client.info("server").get("run_id")) or None
    return None
