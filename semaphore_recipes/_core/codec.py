"""The JSON stored in the coordination service, and its strict decoding."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import CorruptState
from .ramp import RampPlan

# (made once: ``json.dumps`` with any option makes a new encoder per call, about 1 us of
# an entry's 4.4-5.9; the text is the same)
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def encode_capacity(
    capacity: int, *, draining: bool = False, ramp: RampPlan | None = None
) -> bytes:
    """The semaphore's stored config: its capacity, ``"draining": true`` while it
    drains and ``"ramp": {...}`` while a capacity ramp is under way (each absent
    otherwise, so a config never drained nor ramped reads as before)."""
    doc: dict[str, object] = {"capacity": capacity}
    if draining:
        doc["draining"] = True
    if ramp is not None:
        doc["ramp"] = ramp.to_doc()
    return _COMPACT.encode(doc).encode()


def decode_ramp(name: str, raw: bytes | None) -> RampPlan | None:
    """The capacity ramp a stored config (:func:`encode_capacity`) carries, if any."""
    try:
        doc = json.loads(raw or b"").get("ramp")
    except (ValueError, TypeError, AttributeError) as exc:
        raise CorruptState(f"semaphore {name!r}: unreadable stored config {raw!r}") from exc
    return None if doc is None else RampPlan.from_doc(name, doc)


def decode_draining(name: str, raw: bytes | None) -> bool:
    """Whether a stored config (:func:`encode_capacity`) says the semaphore drains."""
    try:
        draining = json.loads(raw or b"").get("draining", False)
    except (ValueError, TypeError, AttributeError) as exc:
        raise CorruptState(f"semaphore {name!r}: unreadable stored config {raw!r}") from exc
    if not isinstance(draining, bool):
        raise CorruptState(f"semaphore {name!r}: stored draining {draining!r} is not a bool")
    return draining


def decode_capacity(name: str, raw: bytes | None) -> int:
    try:
        doc = json.loads(raw or b"")
        capacity = doc["capacity"]
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptState(f"semaphore {name!r}: unreadable stored capacity {raw!r}") from exc
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise CorruptState(f"semaphore {name!r}: stored capacity {capacity!r} is not an int >= 1")
    return capacity


def encode_slot(entry: str, entry_token: int | None = None) -> bytes:
    """A job slot record's value: the key of the entry holding it (and, where keys are
    reused, the entry's token), so a retry after a lost reply knows its own record."""
    doc: dict[str, object] = {"entry": entry}
    if entry_token is not None:
        doc["token"] = entry_token
    return _COMPACT.encode(doc).encode()


def decode_slot(key: str, raw: bytes | None) -> tuple[str, int | None]:
    """``(entry key, entry token or None)`` of a slot record."""
    try:
        doc = json.loads(raw or b"")
        entry, token = doc["entry"], doc.get("token")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptState(f"unreadable slot record {key!r}: {raw!r}") from exc
    if not isinstance(entry, str) or (
        token is not None and (isinstance(token, bool) or not isinstance(token, int))
    ):
        raise CorruptState(f"unreadable slot record {key!r}: {raw!r}")
    return entry, token


@dataclass(frozen=True)
class EntryData:
    """What an entry stores besides its weight: who made it, whether it holds, since when."""

    owner: str
    held: bool
    since: float
    weight: int | None = None  # etcd keeps the weight in the value; ZooKeeper in the name
    lower: tuple[str, ...] | None = None  # with the held mark: the holder's view
    #: a revoke request written by ``Semaphore.revoke`` (absent from the JSON when not)
    revoke: bool = False

    def encode(self) -> bytes:
        doc: dict[str, object] = {"owner": self.owner, "held": self.held, "since": self.since}
        if self.weight is not None:
            doc["w"] = self.weight
        if self.lower is not None:
            doc["lower"] = list(self.lower)
        if self.revoke:
            doc["revoke"] = True
        return _COMPACT.encode(doc).encode()


def decode_entry(key: str, raw: bytes | None) -> EntryData:
    try:
        doc = json.loads(raw or b"")
        owner, held, since = doc["owner"], doc["held"], doc["since"]
        weight = doc.get("w")
        lower = doc.get("lower")
        revoke = doc.get("revoke", False)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptState(f"unreadable queue entry {key!r}: {raw!r}") from exc
    if (
        not isinstance(owner, str)
        or not isinstance(held, bool)
        or isinstance(since, bool)
        or not isinstance(since, (int, float))
        or (weight is not None and (isinstance(weight, bool) or not isinstance(weight, int)))
        or (
            lower is not None
            and not (isinstance(lower, list) and all(isinstance(k, str) for k in lower))
        )
        or not isinstance(revoke, bool)
    ):
        raise CorruptState(f"unreadable queue entry {key!r}: {raw!r}")
    return EntryData(
        owner=owner,
        held=held,
        since=float(since),
        weight=weight,
        lower=None if lower is None else tuple(lower),
        revoke=revoke,
    )
