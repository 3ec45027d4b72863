"""The part of a SQL backend that is the same in every dialect: sessions, queues, retries.

:class:`SQLBackend` keeps the client's session row as its dialect's keeper reports it
(SUSPENDED while a renewal fails and the session may still be alive, HELD again when one
works, LOST once it ended, and then waiters enter the queue again with a new session),
the open queues that the keeper's wake-ups are routed to, and the one retry policy of
removals: a removal not confirmed within the request timeout is tried again in the
background until it works or the session is over (whose end removes the entry anyway).

A dialect subclass gives its runners (``sync``, ``aio``, ``background``), its keeper
(``keeper``: renewals, wake-ups, waiters' timed looks), the SQL text of each named step
(:meth:`SQLBackend.step`) and its fenced transaction.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import logging
import threading
import time
import weakref
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..backend import (
    RESTORED,
    SUSPENDED,
    Backend,
    Capabilities,
    Deadline,
    Enqueued,
    FencedTransaction,
    Program,
    QueueDriver,
    SessionState,
    StoredSemaphore,
    Waiter,
    by_name,
    run_program,
    session_lost,
    validate_name,
)
from ..errors import AcquireTimeout, BackendUnavailable, SemaphoreError
from . import multi
from .lease import Lease
from .queue import SQLQueue
from .requests import Pause, StepArg

__all__ = ["Keeper", "SQLBackend", "StepRunner", "SyncStepRunner"]

T = TypeVar("T")
#: how long a failed background removal waits before it is tried again
BACKGROUND_RETRY = 0.5


class SyncStepRunner(Protocol):
    """A blocking runner of a dialect's programs."""

    def run(self, program: Program[T]) -> T: ...

    def close(self) -> None: ...


class StepRunner(Protocol):
    """An awaited runner of a dialect's programs (the asyncio face)."""

    async def run(self, program: Program[T]) -> T: ...

    def close(self) -> None: ...


class Keeper(Protocol):
    """A dialect's session keeper, as the shared code uses it."""

    def wake(self) -> None:
        """Renew now (a statement found our session gone)."""

    def schedule(self, delay: float, program: Callable[[], Program[object]]) -> None:
        """Run ``program()`` in ``delay`` seconds (a waiter's timed look)."""

    def watch(self, session: str) -> None:
        """A waiter depends on ``session``'s holder: learn of its end sooner if the
        store can tell (else nothing; the timed looks find it)."""

    def stop(self) -> None: ...


class SQLBackend(Backend):
    """Semaphores in one SQL database, over one session row of this client."""

    queue_type = SQLQueue
    #: (what every SQL store can do; each dialect declares the rest)
    capabilities = Capabilities(server_admission=True)
    sync: SyncStepRunner
    background: SyncStepRunner
    aio: StepRunner | None
    keeper: Keeper
    #: the session row's id (replaced when the session ended)
    session: str

    def __init__(
        self, *, owner: str, request_timeout: float, session: str, session_timeout: float
    ) -> None:
        super().__init__(owner=owner, request_timeout=request_timeout)
        self.session = session
        self.lease = Lease(session_timeout)  # (the keeper confirms it)
        self.aio = None
        self._queues: dict[str, weakref.WeakSet[SQLQueue]] = {}
        self._state_lock = threading.Lock()
        self._state = SessionState.CONNECTED
        self._closed = False
        self._reported_lost: str | None = None  # the session whose end was told
        self._retries = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"semaphore-recipes-{self.scheme}-bg"
        )
        self._ids = itertools.count()

    # ---- what a dialect gives ----------------------------------------------------------
    @abstractmethod
    def step(
        self,
        name: str,
        args: Sequence[StepArg],
        where: str,
        *,
        deadline: Deadline | None = None,
        retry: bool = True,
    ) -> Program[str | None]:
        """A program calling the stored routine of step ``name`` with ``args``: its
        answer (text, JSON for most steps; None for SQL NULL). Bounded by a waiting
        acquire's ``deadline`` (AcquireTimeout), else by the request timeout; sent again
        after a transient failure unless ``retry`` is False."""

    @abstractmethod
    def fenced_transaction(
        self, entries: Sequence[tuple[str, str]], token: int
    ) -> FencedTransaction:
        """A transaction fenced on every ``(semaphore, entry id)``, created with ``token``."""

    @abstractmethod
    def stop_keeper(self) -> None:
        """Stop the keeper's thread (before the session is ended on close)."""

    @abstractmethod
    def capacities(self) -> Program[str | None]:
        """One statement: every semaphore's ``[[name, capacity], ...]``, as JSON text."""

    def listing(self) -> Program[tuple[StoredSemaphore, ...]]:
        # a plain read of the semaphores table: no stored routine (nor schema version)
        reply = yield from self.capacities()
        return by_name((str(name), int(capacity)) for name, capacity in json.loads(reply or "[]"))

    def new_entry_id(self) -> str:
        """An entry id of the current session, never given twice by this backend."""
        return f"{self.session}.{next(self._ids)}"

    # ---- running programs ----------------------------------------------------------------
    def run(self, program: Program[T]) -> T:
        refusal = self.refusal()
        if refusal is not None:
            return run_program(program, _answering(refusal))
        return self.sync.run(program)

    async def run_async(self, program: Program[T]) -> T:
        refusal = self.refusal()
        if refusal is not None:
            return run_program(program, _answering(refusal))
        assert self.aio is not None, "the asyncio face's calls need from_url_async"
        return await self.aio.run(program)

    def in_background(self, program: Callable[[], Program[Any]]) -> None:
        """Run ``program()`` on the background runner, tried again until it works or
        the session is over (a removal: the session's end removes the entry anyway)."""
        session = self.session

        def attempt() -> None:
            while not self._closed and self.session == session:
                try:
                    self.background.run(program())
                    return
                except SemaphoreError as exc:
                    _log(self).info("background write failed (%s); trying again", exc)
                    time.sleep(BACKGROUND_RETRY)

        with contextlib.suppress(RuntimeError):  # closed: the session's end removes the rest
            self._retries.submit(attempt)

    def removal(
        self, what: str, first: Program[Any], again: Callable[[], Program[Any]]
    ) -> Program[bool]:
        """Run the removal ``first`` (``what``) within the request timeout: True once
        applied. Not confirmed in time, or interrupted: ``again()`` in the background
        (a removal repeats harmlessly), and an interrupt goes on."""
        try:
            yield from first
        except BackendUnavailable as exc:
            if not self._closed:
                _log(self).warning("%s failed (%s); retrying", what, exc)
                self.in_background(again)
            return False
        except Exception:
            raise
        except BaseException:
            self.in_background(again)
            raise
        return True

    def await_new_session(self, old: str, deadline: Deadline) -> Program[None]:
        """Wait (within ``deadline``) until the keeper replaced the session ``old``."""
        self.keeper.wake()
        while self.session == old:
            self.check_open()
            if deadline.expired():
                raise AcquireTimeout(f"{self.describe()}: no new session in time")
            yield Pause(deadline.cap(0.05))

    def queues(self, name: str | None = None) -> list[SQLQueue]:
        """The open queues (of semaphore ``name``)."""
        with self._state_lock:
            if name is not None:
                return list(self._queues.get(name, ()))
            return [q for found in self._queues.values() for q in found]

    # ---- the session, as the keeper finds it -----------------------------------------------
    def session_vouched(self, contact: float) -> bool:
        # (a step does not renew the session: only the keeper's renewals count)
        return self.lease.vouched()

    def session_suspended(self) -> None:
        with self._state_lock:
            if self._state is not SessionState.CONNECTED:
                return
            self._state = SessionState.SUSPENDED
        self.publish(SUSPENDED)

    def session_restored(self) -> None:
        with self._state_lock:
            if self._state is not SessionState.SUSPENDED:
                return
            self._state = SessionState.CONNECTED
        self.publish(RESTORED)

    def session_ended(self, old: str, new: str | None, why: str) -> None:
        """The session ``old`` is over (``new`` replaces it, once made): permits are
        LOST, waiters with entries of ``old`` enter the queue again."""
        with self._state_lock:
            tell = self._reported_lost != old
            self._reported_lost = old
            if new is not None:
                self.session = new
                self._state = SessionState.CONNECTED
            else:
                self._state = SessionState.EXPIRED
        if tell:
            _log(self).warning("%s session %s ended: %s", self.scheme, old, why)
            self.publish(session_lost(f"the {self.scheme} session ended: {why}"))
            self.requeue_waiters(
                lambda entry_id: entry_id is not None and entry_id.startswith(old + ".")
            )
        if new is not None:
            _log(self).info("%s: new session %s", self.describe(), new)

    def check_holders(self, state: Callable[[str, str, int], int]) -> None:
        """After a renewal: report watched holder entries that are gone, or asked to
        give their permits back (``state(semaphore, entry id, token)``: see
        :meth:`SQLQueue.check_holders`)."""
        for queue in self.queues():
            queue.check_holders(
                lambda key, token, name=queue.name: state(name, key, token)  # type: ignore[misc]
            )

    # ---- Backend ---------------------------------------------------------------------------
    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[QueueDriver]:
        queue = SQLQueue(self, name)
        with self._state_lock:
            self._queues.setdefault(name, weakref.WeakSet()).add(queue)
        return queue.open(capacity, adopt_capacity=adopt_capacity, create=create)

    def enqueue_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> Program[dict[str, Enqueued]]:
        return multi.enqueue_all(self, queues, deadline)

    def delete_all(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> Program[None]:
        return multi.delete_all(self, queues)

    def transaction_all(
        self, entries: Sequence[tuple[QueueDriver, str]], token: int
    ) -> FencedTransaction:
        return self.fenced_transaction([(q.name, k) for q, k in entries], token)

    @property
    def session_state(self) -> SessionState:
        with self._state_lock:
            return SessionState.CLOSED if self._closed else self._state

    def refusal(self) -> BackendUnavailable | None:
        if self._closed:
            return BackendUnavailable(f"the backend of {self.describe()} is closed")
        return None

    def check_open(self) -> None:
        refusal = self.refusal()
        if refusal is not None:
            raise refusal

    def data_key(self, semaphore: str, name: str = "data") -> str:
        return f"{validate_name(semaphore)}/{validate_name(name)}"

    def deleting_semaphore(self, name: str) -> Program[None]:
        yield from self.step("delete_semaphore", (name,), self.describe())

    def ending(self) -> Program[None]:
        """End our session: its entries go and the next holders are admitted."""
        yield from self.step("end_session", (self.session,), self.describe())

    def _closing(self) -> bool:
        with self._state_lock:
            if self._closed:
                return False
            self._closed = True
        return True

    def close(self) -> None:
        """End the session (its entries go; waiters of others are admitted at once)
        and stop the keeper; idempotent. Within the request timeout: when the server
        does not answer, the session expires after the session timeout."""
        if not self._closing():
            return
        self.stop_keeper()  # (first: it must not find the session ended and replace it)
        try:
            self.sync.run(self.ending())
        except SemaphoreError as exc:
            _log(self).warning("%s: closing: %s", self.describe(), exc)
        self.shut()
        self.fail(f"the {self.scheme} backend was closed")

    async def close_async(self) -> None:
        if not self._closing():
            return
        assert self.aio is not None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.stop_keeper)
        try:
            await self.aio.run(self.ending())
        except SemaphoreError as exc:
            _log(self).warning("%s: closing: %s", self.describe(), exc)
        self.shut()
        self.fail(f"the {self.scheme} backend was closed")

    def shut(self) -> None:
        """Stop everything without a word to the server (also after a failed open)."""
        self._closed = True
        self.stop_keeper()
        self._retries.shutdown(wait=False, cancel_futures=True)
        for runner in (self.sync, self.background, self.aio):
            if runner is not None:
                runner.close()


def _log(backend: SQLBackend) -> logging.Logger:
    return logging.getLogger(f"semaphore_recipes.{backend.scheme}")


def _answering(refusal: BackendUnavailable) -> Callable[[object], object]:
    def answer(request: object) -> object:
        raise refusal

    return answer
