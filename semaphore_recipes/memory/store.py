"""The process-wide named stores of the memory backend: what a server would hold.

A :class:`MemoryStore` is one server's state: a revision counter that only grows,
sessions, semaphores (capacity with its version, queue entries in creation order), the
key space fenced transactions write, and watches. Every backend connected to
``memory://NAME`` is one session of the store NAME (:func:`store_named`).

Every operation is atomic under the store's lock. What it tells others (entry watches,
capacity changes) is collected under the lock and delivered after it is released, by
the thread that made the change, before the operation returns: no callback ever runs
under the lock (a callback may call the store again), and a test that drives the store
from one thread sees every effect at once.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from ..backend import EntryData, Write, WriteKind, nearest_needed
from ..errors import PermitLost, WriteConflict

__all__ = [
    "DEFAULT_STORE",
    "MemoryStore",
    "SessionEnded",
    "StoredEntry",
    "drop_store",
    "store_named",
]

#: The store of ``memory://`` (no name).
DEFAULT_STORE = ""

Delivery = Callable[[], None]
_Listener = weakref.WeakMethod[Callable[[int, int, bool], None]]
#: An entry watch's callback: the entry as now marked held, or None when it is deleted.
EntryWatch = Callable[["StoredEntry | None"], None]


class SessionEnded(Exception):
    """The session named in a request has ended (expired or closed)."""


@dataclass(frozen=True)
class StoredEntry:
    """One queue entry: ``token`` is the store revision that created it (its order)."""

    key: str
    token: int
    session: int
    data: EntryData
    revoke_requested: bool = False  # Semaphore.revoke asked its holder to release


@dataclass
class _Semaphore:
    capacity: int
    version: int  # the store revision of the last capacity (or drain flag) write
    draining: bool = False  # the drain flag, kept beside the capacity
    ramp: str | None = None  # a capacity ramp's plan (RampPlan.encode), beside it too
    entries: dict[str, StoredEntry] = field(default_factory=dict)  # in token order
    #: job slots: index -> (key of the entry holding it, the record's token)
    slots: dict[int, tuple[str, int]] = field(default_factory=dict)


class MemoryStore:
    """One in-process "server". Made by :func:`store_named`; used by the backends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._revision = 0
        self._ids = itertools.count(1)  # sessions, entry numbers, watch ids
        self._sessions: set[int] = set()
        self._semaphores: dict[str, _Semaphore] = {}
        # path -> listener id -> apply_capacity of a queue (kept across delete_semaphore)
        self._capacity_listeners: dict[str, dict[int, _Listener]] = {}
        self._data: dict[str, bytes] = {}
        self._watches: dict[tuple[str, str], dict[int, EntryWatch]] = {}
        # (path, key) -> the holder's revocation callback (one holder per entry)
        self._revoke_watches: dict[tuple[str, str], Callable[[], None]] = {}

    def __repr__(self) -> str:
        return f"<MemoryStore {self.name!r} revision={self._revision}>"

    # ---- sessions -----------------------------------------------------------------
    def open_session(self) -> int:
        with self._lock:
            session = next(self._ids)
            self._sessions.add(session)
            return session

    def sessions(self) -> set[int]:
        """The live sessions."""
        with self._lock:
            return set(self._sessions)

    def end_session(self, session: int) -> Delivery:
        """End ``session`` now: no request on it succeeds any more and its entries are
        deleted. Returns what tells the watchers of those entries, for the caller to run
        once it has told its own permits and waiters (they must learn of the session's
        end before they can see its entries gone)."""
        with self._lock:
            self._sessions.discard(session)
            deliveries: list[Delivery] = []
            for path, semaphore in self._semaphores.items():
                for entry in [e for e in semaphore.entries.values() if e.session == session]:
                    deliveries += self._delete_locked(path, semaphore, entry.key)
        return _all(deliveries)

    def new_entry_key(self, session: int) -> str:
        """A key no entry of this store ever had: ``<session hex>-<number>``."""
        with self._lock:
            return f"{session:x}-{next(self._ids)}"

    @staticmethod
    def session_of(entry_key: str) -> int:
        """The session an entry key was made for (see :meth:`new_entry_key`)."""
        return int(entry_key.partition("-")[0], 16)

    # ---- semaphores -------------------------------------------------------------------
    def open_semaphore(
        self,
        path: str,
        capacity: int | None,
        listener: Callable[[int, int, bool], None],
    ) -> tuple[int, int, bool] | None:
        """Create the semaphore at ``path`` with ``capacity`` unless it exists (None: do
        not create); return its ``(capacity, version, draining)``, or None if there is
        none. ``listener(capacity, version, draining)`` is then called on every change
        of the capacity or the drain flag, for as long as its object lives (it is held
        weakly)."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            if semaphore is None:
                if capacity is None:
                    return None
                self._revision += 1
                semaphore = self._semaphores[path] = _Semaphore(capacity, self._revision)
            listeners = self._capacity_listeners.setdefault(path, {})
            listeners[next(self._ids)] = weakref.WeakMethod(listener)
            return semaphore.capacity, semaphore.version, semaphore.draining

    def _semaphore(self, path: str, capacity: int) -> _Semaphore:
        """The semaphore at ``path``, made again with ``capacity`` if it was deleted
        (waiters and ``set_capacity`` re-create a deleted semaphore, as on a server)."""
        semaphore = self._semaphores.get(path)
        if semaphore is None:
            self._revision += 1
            semaphore = self._semaphores[path] = _Semaphore(capacity, self._revision)
        return semaphore

    def set_capacity(self, path: str, capacity: int) -> None:
        """Store ``capacity``, dropping any ramp plan (a plain change cancels it)."""
        self._set_config(path, capacity, None)

    def set_draining(self, path: str, draining: bool, capacity: int) -> None:
        """Set or clear the drain flag (the semaphore made again with ``capacity`` if
        it was deleted, as ``set_capacity`` does)."""
        self._set_config(path, capacity, draining)

    def write_ramp(self, path: str, capacity: int, ramp: str | None, version: int) -> int | None:
        """A capacity ramp's step: store ``capacity`` and the plan ``ramp`` if the
        config's version is still ``version``: the new version, or None (nothing
        written; also when there is no semaphore)."""
        with self._lock:
            if path not in self._semaphores:
                return None
        return self._set_config(path, capacity, None, ramp, expected=version)

    def config(self, path: str) -> tuple[int, str | None] | None:
        """The config's version and the ramp plan stored beside it (None: no semaphore)."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            return None if semaphore is None else (semaphore.version, semaphore.ramp)

    def _set_config(
        self,
        path: str,
        capacity: int,
        draining: bool | None,
        ramp: str | None = None,
        expected: int | None = None,
    ) -> int | None:
        """Write the capacity (dropping any ramp plan, or storing ``ramp``) or the
        drain flag (keeping the rest), with a new version: that version; ``expected``:
        only over that version (else nothing is written: None)."""
        with self._lock:
            semaphore = self._semaphore(path, capacity)
            if expected is not None and semaphore.version != expected:
                return None
            self._revision += 1
            if draining is None:
                semaphore.capacity, semaphore.ramp = capacity, ramp
            else:
                semaphore.draining = draining
            semaphore.version = self._revision
            capacity, draining = semaphore.capacity, semaphore.draining
            listeners = []
            refs = self._capacity_listeners.get(path, {})
            for listener_id, ref in list(refs.items()):
                listener = ref()
                if listener is None:
                    del refs[listener_id]
                else:
                    listeners.append(listener)
            version = self._revision
        for listener in listeners:
            listener(capacity, version, draining)
        return version

    def capacities(self, under: str) -> dict[str, int]:
        """name -> capacity of the semaphores at ``under/<name>``, read at once."""
        start = under + "/"
        with self._lock:
            return {
                path[len(start) :]: semaphore.capacity
                for path, semaphore in self._semaphores.items()
                if path.startswith(start) and "/" not in path[len(start) :]
            }

    def queue(self, path: str) -> tuple[int | None, bool, list[StoredEntry], dict[int, str]]:
        """The capacity (None: deleted), the drain flag, the entries (in queue order)
        and the job slots (index -> entry key) of a semaphore, read at once."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            if semaphore is None:
                return None, False, [], {}
            slots = {index: key for index, (key, _) in semaphore.slots.items()}
            entries = list(semaphore.entries.values())
            return semaphore.capacity, semaphore.draining, entries, slots

    # ---- job slots ----------------------------------------------------------------------
    def slots(self, path: str) -> frozenset[int]:
        """The indices of a semaphore's job slots."""
        return frozenset(self.queue(path)[3])

    def take_slot(
        self, path: str, entry_key: str, token: int, index: int
    ) -> int | frozenset[int] | None:
        """Create the record of slot ``index`` for the entry ``entry_key`` (created with
        ``token``), if no record of that index exists: its token (a store revision); the
        indices of the slots as they are when another entry holds it; None when
        the entry is gone. The record is deleted with its entry, in the same step."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            entry = None if semaphore is None else semaphore.entries.get(entry_key)
            if semaphore is None or entry is None or entry.token != token:
                return None
            held = semaphore.slots.get(index)
            if held is not None:
                if held[0] == entry_key:
                    return held[1]
                return frozenset(semaphore.slots)
            self._revision += 1
            semaphore.slots[index] = (entry_key, self._revision)
            return self._revision

    def delete_semaphore(self, path: str) -> None:
        """Delete the semaphore at ``path``: its capacity, its entries (their watchers
        are told) and the data keys under it."""
        with self._lock:
            deliveries: list[Delivery] = []
            semaphore = self._semaphores.get(path)
            if semaphore is not None:
                for key in list(semaphore.entries):
                    deliveries += self._delete_locked(path, semaphore, key)
                del self._semaphores[path]
            for key in [k for k in self._data if k.startswith(path + "/")]:
                del self._data[key]
            self._revision += 1
        _all(deliveries)()

    # ---- queue entries ------------------------------------------------------------------
    def create_entry(
        self, path: str, key: str, session: int, data: EntryData, capacity: int
    ) -> tuple[StoredEntry, list[StoredEntry], bool, int, int, bool]:
        """Create the entry ``key`` on ``session``; return it, the entries lower than it
        (the others: it is the newest; only the nearest ``nearest_needed`` of them),
        whether those are all of them, and the capacity with its version and the drain
        flag (the semaphore
        is made again with ``capacity`` if it was deleted). SessionEnded when the
        session has ended."""
        return self.create_entries(session, [(path, key, data, capacity)])[0]

    def create_entries(
        self, session: int, requests: Sequence[tuple[str, str, EntryData, int]]
    ) -> list[tuple[StoredEntry, list[StoredEntry], bool, int, int, bool]]:
        """:meth:`create_entry` for each ``(path, key, data, capacity)``, all at once:
        one revision, so every entry has the same token (a multi-acquire's entries).
        SessionEnded when the session has ended (nothing is created then)."""
        with self._lock:
            if session not in self._sessions:
                raise SessionEnded(session)
            self._revision += 1
            answers = []
            for path, key, data, capacity in requests:
                semaphore = self._semaphore(path, capacity)
                entry = StoredEntry(key, self._revision, session, data)
                nearest = nearest_needed(semaphore.capacity)
                lower = list(itertools.islice(reversed(semaphore.entries.values()), nearest))
                lower.reverse()
                complete = len(semaphore.entries) <= nearest
                semaphore.entries[key] = entry
                config = (semaphore.capacity, semaphore.version, semaphore.draining)
                answers.append((entry, lower, complete, *config))
            return answers

    def delete_entries(self, entries: Iterable[tuple[str, str]]) -> None:
        """Delete each ``(path, key)`` entry there is, all at once."""
        deliveries: list[Delivery] = []
        with self._lock:
            for path, key in entries:
                semaphore = self._semaphores.get(path)
                if semaphore is not None and key in semaphore.entries:
                    deliveries += self._delete_locked(path, semaphore, key)
        _all(deliveries)()

    def entries(self, path: str, below: int | None = None) -> list[StoredEntry]:
        """The entries of a semaphore in queue order (those with a token below ``below``)."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            entries = () if semaphore is None else semaphore.entries.values()
            return [e for e in entries if below is None or e.token < below]

    def watch_entries(
        self, path: str, keys: Sequence[str], watch: Callable[[str], EntryWatch]
    ) -> dict[str, tuple[StoredEntry | None, int | None]]:
        """Read each key and, if it exists, watch it (``watch(key)`` makes the callback),
        in one atomic step: ``{key: (entry or None, watch id or None)}``. The watch stays
        across a held mark; a deletion ends it."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            found: dict[str, tuple[StoredEntry | None, int | None]] = {}
            for key in keys:
                entry = None if semaphore is None else semaphore.entries.get(key)
                if entry is None:
                    found[key] = (None, None)
                    continue
                watch_id = next(self._ids)
                self._watches.setdefault((path, key), {})[watch_id] = watch(key)
                found[key] = (entry, watch_id)
            return found

    def unwatch(self, path: str, key: str, watch_id: int) -> None:
        with self._lock:
            watches = self._watches.get((path, key))
            if watches is not None:
                watches.pop(watch_id, None)
                if not watches:
                    del self._watches[(path, key)]

    def mark_held(self, path: str, key: str, token: int, mark: EntryData) -> bool:
        """Write the held mark on entry ``key`` if it still has ``token``: False when it
        is gone (the mark never re-creates an entry)."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            entry = None if semaphore is None else semaphore.entries.get(key)
            if semaphore is None or entry is None or entry.token != token:
                return False
            self._revision += 1
            marked = replace(entry, data=mark)
            semaphore.entries[key] = marked
            watches = list(self._watches.get((path, key), {}).values())
        for watch in watches:
            watch(marked)
        return True

    def request_revoke(self, path: str, key: str, token: int) -> bool:
        """Set the revoke request on entry ``key`` if it still has ``token`` and tell its
        holder's revocation watch: False when it is gone."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            entry = None if semaphore is None else semaphore.entries.get(key)
            if semaphore is None or entry is None or entry.token != token:
                return False
            self._revision += 1
            semaphore.entries[key] = replace(entry, revoke_requested=True)
            told = self._revoke_watches.pop((path, key), None)
        if told is not None:
            told()
        return True

    def watch_revocation(
        self, path: str, key: str, token: int, on_revoke: Callable[[], None]
    ) -> None:
        """Call ``on_revoke`` once the entry ``key`` (of ``token``) has a revoke request:
        now if it has one already; nothing if it is gone (its entry watch tells)."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            entry = None if semaphore is None else semaphore.entries.get(key)
            if entry is None or entry.token != token:
                return
            if not entry.revoke_requested:
                self._revoke_watches[(path, key)] = on_revoke
                return
        on_revoke()

    def unwatch_revocation(self, path: str, key: str) -> None:
        with self._lock:
            self._revoke_watches.pop((path, key), None)

    def delete_entry(self, path: str, key: str, token: int | None = None) -> bool:
        """Delete the entry ``key`` of the semaphore at ``path`` (only if it has
        ``token``, when given); False if there is none."""
        with self._lock:
            semaphore = self._semaphores.get(path)
            entry = None if semaphore is None else semaphore.entries.get(key)
            if semaphore is None or entry is None or token not in (None, entry.token):
                return False
            deliveries = self._delete_locked(path, semaphore, key)
        _all(deliveries)()
        return True

    def _delete_locked(self, path: str, semaphore: _Semaphore, key: str) -> list[Delivery]:
        del semaphore.entries[key]
        for index in [i for i, (holder, _) in semaphore.slots.items() if holder == key]:
            del semaphore.slots[index]  # a slot record dies with its entry, in one step
        self._revision += 1
        watches = self._watches.pop((path, key), {})
        self._revoke_watches.pop((path, key), None)
        return [functools.partial(watch, None) for watch in watches.values()]

    # ---- the key space of fenced transactions ------------------------------------------
    def read(self, key: str) -> bytes | None:
        with self._lock:
            return self._data.get(key)

    def commit_fenced(
        self, fences: Sequence[tuple[str, str]], token: int, writes: Iterable[Write]
    ) -> None:
        """Apply ``writes`` all or none, while every ``(path, entry key)`` of ``fences``
        (one permit's entries, which share ``token``) still has ``token`` (PermitLost
        otherwise); WriteConflict when a write's condition fails."""
        with self._lock:
            for path, entry_key in fences:
                semaphore = self._semaphores.get(path)
                entry = None if semaphore is None else semaphore.entries.get(entry_key)
                if entry is None or entry.token != token:
                    raise PermitLost(
                        f"fence failed: the permit's entry {path}/{entry_key} (token {token}) "
                        "is gone"
                    )
            staged: dict[str, bytes | None] = {}  # key -> its value after the writes so far
            for write in writes:
                exists = (
                    staged[write.key] is not None
                    if write.key in staged
                    else write.key in self._data
                )
                if write.kind is WriteKind.CREATE:
                    if exists:
                        raise WriteConflict(write.key, "it exists")
                elif not exists:
                    raise WriteConflict(write.key, "it does not exist")
                staged[write.key] = None if write.kind is WriteKind.DELETE else write.value
            self._revision += 1
            for key, value in staged.items():
                if value is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = value

    # ---- as an operator sees it ---------------------------------------------------------
    def entry_paths(self, prefix: str = "") -> list[str]:
        """The full path (``<semaphore path>/<entry key>``) of every queue entry under
        ``prefix``, semaphore by semaphore, each in queue order, then its job slot
        records (``<semaphore path>/+slot+<index>``)."""
        with self._lock:
            return [
                path
                for name, semaphore in sorted(self._semaphores.items())
                if name.startswith(prefix)
                for path in [
                    *(f"{name}/{key}" for key in semaphore.entries),
                    *(f"{name}/+slot+{index}" for index in sorted(semaphore.slots)),
                ]
            ]

    def delete(self, entry_path: str) -> bool:
        """Delete a queue entry by its full path, as an operator would (its holder's
        ``watch_entry`` and the waiters watching it are told); False if there is none."""
        path, _, key = entry_path.rpartition("/")
        return self.delete_entry(path, key)


def _all(deliveries: list[Delivery]) -> Delivery:
    def deliver() -> None:
        for delivery in deliveries:
            delivery()

    return deliver


_stores: dict[str, MemoryStore] = {}
_stores_lock = threading.Lock()


def store_named(name: str = DEFAULT_STORE) -> MemoryStore:
    """The process-wide store ``name`` (made on first use): what ``memory://NAME`` opens."""
    with _stores_lock:
        store = _stores.get(name)
        if store is None:
            store = _stores[name] = MemoryStore(name)
        return store


def drop_store(name: str) -> None:
    """Forget the store ``name``: the next ``memory://NAME`` starts from an empty store
    (backends still open keep the old one)."""
    with _stores_lock:
        _stores.pop(name, None)
