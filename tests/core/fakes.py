"""A backend with no store, for the face's own tests: only the session bookkeeping
every backend inherits."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from semaphore_recipes._url import ServiceURL
from semaphore_recipes.backend import (
    Backend,
    Deadline,
    Enqueued,
    Entry,
    EntryData,
    EntryState,
    Program,
    QueueDriver,
    SessionLost,
    SessionState,
    Waiter,
    run_program,
)

T = TypeVar("T")


class FakeQueue(QueueDriver):
    """A queue driver whose hooks do nothing (or are not reached): a test's store
    overrides the ones its scenario uses."""

    def enqueue(self, waiter: Waiter, deadline: Deadline) -> Program[Enqueued]:
        raise AssertionError("not reached")

    def arm(
        self, waiter: Waiter, keys: tuple[str, ...], deadline: Deadline
    ) -> Program[Mapping[str, EntryState | None] | SessionLost]:
        raise AssertionError("not reached")

    def relist(self, waiter: Waiter, deadline: Deadline) -> Program[Sequence[Entry] | SessionLost]:
        raise AssertionError("not reached")

    def write_mark(
        self, key: str, token: int, mark: EntryData, on_lost: Callable[[str], None]
    ) -> None: ...

    def confirm(self, waiter: Waiter, deadline: Deadline) -> Program[bool]:
        raise AssertionError("not reached")

    def abandon(self, waiter: Waiter, slot_records: Mapping[int, int | None]) -> Program[None]:
        yield from ()

    def remove(self, key: str, slot_records: Mapping[int, int | None]) -> Program[None]:
        yield from ()

    def watch_entry(self, key: str, token: int, on_lost: Callable[[str], None]) -> None: ...

    def status(self) -> Program[Any]:
        raise AssertionError("not reached")

    def set_capacity(self, capacity: int) -> Program[None]:
        yield from ()

    def transaction(self, key: str, token: int) -> Any:
        raise AssertionError("not reached")


class Hub(Backend):
    """Only the session bookkeeping every backend inherits."""

    scheme = "face-test"
    queue_type = FakeQueue

    def __init__(self) -> None:
        super().__init__(owner="owner", request_timeout=5.0)

    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> Backend:
        raise AssertionError("not used")

    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[QueueDriver]:
        raise AssertionError("not used")

    def describe(self) -> str:
        return "the face's test hub"

    @property
    def session_state(self) -> SessionState:
        return SessionState.CONNECTED

    def session_vouched(self, contact: float) -> bool:
        return True

    def run(self, program: Program[T]) -> T:
        return run_program(program, lambda request: None)

    def reading(self, key: str) -> Program[bytes | None]:
        yield from ()
        return None

    def data_key(self, semaphore: str, name: str = "data") -> str:
        return f"{semaphore}/{name}"

    def deleting_semaphore(self, name: str) -> Program[None]:
        yield from ()

    def close(self) -> None: ...
