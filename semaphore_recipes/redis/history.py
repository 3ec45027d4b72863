"""Telling that a Redis data set's history went back behind this client.

Every order, fencing token and capacity version comes from a counter (``P:seq``; on
Redis Cluster one per hash tag, :mod:`.layout`), which only grows while the data set
lives. A server that restarted without persistence
(empty), that was flushed, or a replica promoted before it had the latest writes, has a
counter lower than one this client saw: tokens will be handed out again. The lease
keeper notes the counter with each renewal (the RENEW script returns it:
:meth:`StoreHistory.note_counter`), as does each enqueue (an entry's order is a counter
value), and the run id once, after its first renewal
(:meth:`StoreHistory.note`: nothing else is sent on the keeper's path, whose timing tells a
cut connection; a read before the first renewal hung there when the network was cut)
and, when it finds its lease gone, asks :meth:`StoreHistory.went_back` before making a
new one: a counter lower than the highest noted, or none at all on a server whose
``run_id`` (``INFO server``, where the ACL allows it; not asked of a cluster, whose
nodes each have one) changed, tells the data set is not the one the lease was made in.
A renewal that works can tell it too (``LeaseKeeper``, :meth:`StoreHistory.behind`):
after a failover the lease may have reached the promoted replica while later grants
did not, and its counter is then lower than one noted before the renewal was sent (on
one primary the counter a renewal reads is never lower than one read before it). A
failover to a replica that has everything changes the run id but not the counter: the
data set goes on.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import redis

__all__ = ["StoreHistory", "counter_key"]


class StoreHistory:
    """The highest counter value this client has seen under each key prefix it uses
    (one on a single primary; one per hash tag on Redis Cluster, :mod:`.layout`), and
    the server's run id (a single primary's: a cluster has one per node)."""

    def __init__(self, *, one_server: bool = True) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}
        self.one_server = one_server
        self.run_id: str | None = None

    def counter(self, prefix: str) -> int:
        """The highest value of ``prefix``'s counter seen (0: none)."""
        with self._lock:
            return self._counters.get(prefix, 0)

    def note(self, client: Any, prefix: str) -> None:
        """Note ``prefix``'s counter now (and, the first time, the server's run id); a
        failure to read is ignored (the next renewal notes again)."""
        counter = _counter(client, counter_key(prefix))
        run_id = _run_id(client) if self.run_id is None and self.one_server else None
        with self._lock:
            if counter is not None:
                self._counters[prefix] = max(self._counters.get(prefix, 0), counter)
            if self.run_id is None:
                self.run_id = run_id

    def note_counter(self, prefix: str, counter: int) -> None:
        """Note a value of ``prefix``'s counter that a reply carried (no I/O)."""
        with self._lock:
            self._counters[prefix] = max(self._counters.get(prefix, 0), counter)

    def went_back(self, client: Any, where: str) -> str | None:
        """Why the data set has a history older than the one this client knew, in
        words; None when it has not (or it cannot be read now)."""
        with self._lock:
            seen_all, known_run = dict(self._counters), self.run_id
        run_id = _run_id(client) if self.one_server else None
        restarted = ""
        if known_run and run_id and run_id != known_run:
            restarted = f"the server restarted (run id {run_id}, was {known_run}) and "
        for prefix, seen in seen_all.items():
            key = counter_key(prefix)
            counter = _counter(client, key)
            if counter is None:
                return None
            # lower than seen; or none at all after a restart: the lease that was there
            # (this client's, found gone) went with the rest of the data
            if counter < seen:
                what = f"its counter {key} is {counter}, lower than the {seen} seen"
            elif restarted and counter == 0:
                what = f"its counter {key} is gone"
            else:
                continue
            return _reason(where, restarted, what)
        return None

    def behind(self, prefix: str, counter: int, seen: int, where: str) -> str:
        """Why the data set went back, in words, when a renewal read ``prefix``'s
        ``counter`` below ``seen`` (the highest noted before the renewal was sent)."""
        key = counter_key(prefix)
        return _reason(where, "", f"its counter {key} is {counter}, lower than the {seen} seen")


def _reason(where: str, restarted: str, what: str) -> str:
    return (
        f"the Redis store's history restarted ({where}): {restarted}{what} "
        "(it restarted without persistence, was flushed, or a replica that lacked the "
        "latest writes took over); every lease, entry and fencing token of before is "
        "gone (tokens are handed out again: reset a fence that kept them, "
        "docs/operations.md); open a new backend"
    )


def counter_key(prefix: str) -> str:
    """The counter of the semaphores under key prefix ``prefix`` (:mod:`.scripts`)."""
    return f"{prefix}:seq"


def _counter(client: Any, key: str) -> int | None:
    with contextlib.suppress(redis.exceptions.RedisError, ValueError):
        raw = client.get(key)
        return int(raw or 0)
    return None


def _run_id(client: Any) -> str | None:
    with contextlib.suppress(redis.exceptions.RedisError):  # (an ACL may refuse INFO)
        return str(client.info("server").get("run_id")) or None
    return None
