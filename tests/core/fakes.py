"""A backend with no store, for the face's own tests: only the session bookkeeping
every backend inherits."""

from __future__ import annotations

from typing import TypeVar

from semaphore_recipes._url import ServiceURL
from semaphore_recipes.backend import Backend, Program, QueueDriver, SessionState, run_program

T = TypeVar("T")


class Hub(Backend):
    """Only the session bookkeeping every backend inherits."""

    scheme = "face-test"

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
