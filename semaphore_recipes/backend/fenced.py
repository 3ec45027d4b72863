"""Fenced writes: writes into the store's own key space that commit only while a permit
is held (``permit.transaction()``).

A commit whose answer did not come within the request timeout raises
BackendUnavailable and may still be applied; the fence holds either way.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import final

from .runner import Program, Runner


class WriteKind(enum.Enum):
    CREATE = "create"  #: the key must not exist
    SET = "set"  #: the key must exist; its value is replaced
    DELETE = "delete"  #: the key must exist; it is deleted


@dataclass(frozen=True)
class Write:
    """One write of a fenced transaction."""

    kind: WriteKind
    key: str
    value: bytes = b""


class FencedTransaction(ABC):
    """Writes into the store's own key space that commit only while a permit is held.

    The same three operations on every backend, applied all or none by ``commit()``:
    :meth:`create` (the key must not exist), :meth:`set` (the key must exist) and
    :meth:`delete` (the key must exist). Keys are the store's: ZooKeeper paths inside
    the URL's chroot (the parent must exist), etcd keys as they are, memory keys as
    strings. ``commit()`` raises PermitLost when the fence fails (the permit was
    released, or its session or entry is gone), WriteConflict when the fence holds but
    an operation's condition fails (nothing is written), PermissionDenied when the store
    refuses the user, and BackendUnavailable when no answer came within the request
    timeout: then it may still have been applied (read back before committing again).
    A key is written at most once per transaction (ValueError before any I/O).
    """

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.writes: list[Write] = []

    def create(self, key: str, value: bytes = b"") -> FencedTransaction:
        """Create ``key`` with ``value``; the commit fails if it exists."""
        return self._add(Write(WriteKind.CREATE, key, value))

    def set(self, key: str, value: bytes) -> FencedTransaction:
        """Replace the value of ``key``; the commit fails if it does not exist."""
        return self._add(Write(WriteKind.SET, key, value))

    def delete(self, key: str) -> FencedTransaction:
        """Delete ``key``; the commit fails if it does not exist."""
        return self._add(Write(WriteKind.DELETE, key))

    def _add(self, write: Write) -> FencedTransaction:
        if not isinstance(write.key, str) or not write.key:
            raise TypeError(f"a key is a non-empty str, not {write.key!r}")
        if not isinstance(write.value, bytes):
            raise TypeError(f"a value is bytes, not {type(write.value).__name__}")
        if any(w.key == write.key for w in self.writes):
            raise ValueError(f"{write.key!r} is written twice in one transaction")
        self.writes.append(write)
        return self

    @abstractmethod
    def apply(self) -> Program[None]:
        """The store's side: apply every write and the fence in one atomic request, or
        none (the errors of the class docstring), within the request timeout."""

    @final
    def commit(self) -> None:
        """Apply every write, or none (see the class docstring for the errors)."""
        self.runner.run(self.apply())

    @final
    async def commit_async(self) -> None:
        """:meth:`commit` for the asyncio face."""
        await self.runner.run_async(self.apply())
