"""What one process knows of a queue: its newest listing, less the entries gone since.

A waiter whose view went stale asks for every entry lower than its own (the protocol's
``Relist``). ZooKeeper can only list all the children of the semaphore node, so with W
waiters each such listing sends back O(W) bytes, and in a drain across processes some
waiters re-list at a rate that does not fall with W: O(W) bytes per grant (figures in
docs/benchmarks.md, "Scale"). The process already holds a listing of the queue (the one
its enqueues shared, or an earlier re-list) and learns of deletions as it goes: the
entries its reads find gone, its entry watches' deletions, its own deletes, and held
marks, each of which names the holder's whole view when admitted (every older entry not
in it is gone). The answer to a re-list is then that listing's entries lower than the
waiter's, less those known gone.

*Why this is safe:* a listing that holds the waiter's own entry was answered after its
create, so it holds every entry lower than it that still existed then; lower entries
are never created later, and only entries truly gone are removed. The answer is a
superset of the true lower set, which is all the protocol's safety asks of a view (a
view from a listing is one too). An entry gone but not known gone costs a read: the
waiter watches it, finds it gone, and this record learns it for every later re-list.
When the record does not hold the waiter's entry (made after that listing), the
waiter lists the queue; that listing becomes the record.

*Why it lists again anyway:* entries other processes deleted are not known gone here
until a read finds them so (a *miss*: one request each). Under churn (50 clients in 5
processes, no hold) answers from the record held stale entries and a grant cost 45
requests against 5 with a listing each time. So a record of fewer than
:data:`LISTS_BELOW` entries is not answered from (a listing is cheap there), and a
longer one answers until the misses since its listing reach one per
:data:`ENTRIES_PER_MISS` entries it holds, then the next re-list lists the queue: the
misses a listing may cost grow with its length, so the bytes a grant costs stay flat
in W.

Connection loss or session expiry change nothing here: what is known gone stays gone
(entry names are never reused), and a new session's entries are not in the record, so
their waiters list.

*What it keeps:* the names known gone serve a listing answered before their deletion
and installed after it; a listing installed keeps only those it holds, and between
listings (a client cycling alone lists nothing) the newest :data:`GONE_KEPT` are kept.
Forgetting one costs at most a read, never safety, and memory stays bounded however
long the process runs.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from .._core.queue import Entry

__all__ = ["ENTRIES_PER_MISS", "GONE_KEPT", "LISTS_BELOW", "KnownQueue"]

#: a record of fewer entries than this is not answered from: the queue is listed
LISTS_BELOW = 64
#: the entries of a listing that pay for one miss before the queue is listed again (a
#: miss is about 100 bytes of request and reply, an entry's name about 52 in a listing)
ENTRIES_PER_MISS = 8
#: the names known gone kept between listings, the newest (see module)
GONE_KEPT = 4096


class KnownQueue:
    """The newest listing of one queue (by the node's child version), less what is
    known gone (see module). Shared by the threads and tasks of one semaphore object."""

    def __init__(
        self,
        entries_per_miss: int = ENTRIES_PER_MISS,
        lists_below: int = LISTS_BELOW,
        gone_kept: int = GONE_KEPT,
    ) -> None:
        self._lock = threading.Lock()
        self._entries_per_miss = entries_per_miss
        self._lists_below = lists_below
        self._gone_kept = gone_kept
        # (czxid, cversion) of the semaphore node when the listing was answered: a node
        # made again (deleted by hand) starts its child version anew
        self._version = (-1, -1)
        # (sequence, weight, name), sorted; an entry gone stays here until compacted
        # (a drain learns its deletions from the front: each one removed at once
        # would move the rest of the list)
        self._entries: list[tuple[int, int, str]] = []
        self._sequence: dict[str, int] = {}  # name -> sequence, of the entries kept
        # Names known gone, removed from any listing installed later (a listing answered
        # before the deletion may be installed after it), oldest first; only those in
        # the listing are kept, and at most ``gone_kept`` (see module)
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._misses = 0  # entries of the listing a read found gone since it was answered
        self._budget = 0  # the misses after which a re-list lists (see module)

    def listed(self, node: Any, entries: list[tuple[int, int, str]]) -> None:
        """A listing answered with the semaphore node's stat ``node``, as sorted
        (sequence, weight, name): kept if newer than the one held."""
        version = (node.czxid, node.cversion)
        with self._lock:
            if version < self._version:
                return
            self._misses = 0  # (the same version: nothing changed since the record's)
            if version == self._version:
                return
            self._version = version
            short = len(entries) < self._lists_below
            self._budget = 0 if short else len(entries) // self._entries_per_miss
            self._entries = [e for e in entries if e[2] not in self._gone]
            self._sequence = {name: seq for seq, _, name in self._entries}
            listed = {name for _, _, name in entries}
            self._gone = OrderedDict((name, None) for name in self._gone if name in listed)

    def gone(self, name: str) -> None:
        """The entry ``name`` was deleted (a read found it gone, a watch or our own
        delete's reply said so)."""
        with self._lock:
            self._gone[name] = None
            if len(self._gone) > self._gone_kept:
                self._gone.popitem(last=False)  # (the oldest)
            if self._sequence.pop(name, None) is not None:
                self._compact_if_sparse()

    def found_gone(self, name: str) -> None:
        """A read of ``name`` found it gone: :meth:`gone`, and a miss if the record
        still held it (a re-list answered from it cost that read)."""
        with self._lock:
            if name in self._sequence:
                self._misses += 1
        self.gone(name)

    def _compact_if_sparse(self) -> None:
        if len(self._entries) > 2 * len(self._sequence) + 64:
            self._entries = [e for e in self._entries if e[2] in self._sequence]

    def held_with(self, name: str, lower: Iterable[str]) -> None:
        """The entry ``name`` is held and its mark records ``lower``, its whole view
        when admitted (admission never comes from a truncated view): a superset of
        what was lower than it then, so every older entry not in it is gone."""
        keep = set(lower)
        with self._lock:
            seq = self._sequence.get(name)
            if seq is None:
                return
            below = bisect.bisect_left(self._entries, (seq,))
            older = self._entries[:below]
            for _, _, gone in older:
                if gone not in keep:
                    self._sequence.pop(gone, None)
            self._entries[:below] = [e for e in older if e[2] in self._sequence]

    def lower_than(self, name: str, sequence: int) -> list[Entry] | None:
        """The entries lower than ours (``name`` of ``sequence``) not known gone: a
        superset of the true lower set; None when the listing held does not have our
        entry (it may lack entries lower than ours: list the queue), or when its misses
        used up their budget (see module)."""
        with self._lock:
            if self._sequence.get(name) != sequence or self._misses >= self._budget:
                return None
            below = bisect.bisect_left(self._entries, (sequence,))
            return [
                Entry(key=n, order=s, weight=w)
                for s, w, n in self._entries[:below]
                if n in self._sequence
            ]
