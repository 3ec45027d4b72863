"""The checker file: worker processes record there, under a file lock, the weight they
hold at once, so a test can see whether capacity was ever exceeded across processes."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

__all__ = ["checked", "checked_holds", "read_checker"]


def checked(path: str, delta: int) -> None:
    """Add ``delta`` to the concurrent held weight in ``path`` (under an exclusive lock)."""
    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        state = json.loads(f.read() or '{"now": 0, "max": 0, "grants": 0}')
        state["now"] += delta
        state["max"] = max(state["max"], state["now"])
        state["grants"] += delta > 0
        f.seek(0)
        f.truncate()
        f.write(json.dumps(state))


def checked_holds(path: str, pid: int, weights: dict[str, int] | None) -> None:
    """Record that ``pid`` now holds ``weights`` (None: nothing) in the per-semaphore
    held weight in ``path``, and the most ever held of each (under an exclusive lock)."""
    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        state = json.loads(f.read() or '{"holds": {}, "max": {}, "grants": 0}')
        if weights is None:
            state["holds"].pop(str(pid), None)
        else:
            state["holds"][str(pid)] = weights
            state["grants"] += 1
        for name in {n for h in state["holds"].values() for n in h}:
            now = sum(h.get(name, 0) for h in state["holds"].values())
            state["max"][name] = max(state["max"].get(name, 0), now)
        f.seek(0)
        f.truncate()
        f.write(json.dumps(state))


def read_checker(path: Path) -> dict[str, int]:
    """The workers' concurrent-weight record, read under their lock (never half-written)."""
    with path.open() as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        text = f.read()
    result: dict[str, int] = json.loads(text) if text else {"now": 0, "max": 0, "grants": 0}
    return result
