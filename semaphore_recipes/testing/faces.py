"""Run tests written against the sync face through the asyncio face as well.

:class:`BlockingAsyncBackend` is a blocking view of an :class:`~semaphore_recipes.aio.AsyncBackend`
whose coroutines run on an event loop in a thread of its own (:class:`LoopThread`): a test
calls ``backend.semaphore(...).acquire(...)`` as it would on the sync face, and the call
is an ``await`` on that loop. An interrupt of the calling thread (``KeyboardInterrupt``,
as the interrupt tests send) cancels the awaiting task, and the call returns once the
task is over, cancellation cleanup included: the sync face's interrupt tests become the
asyncio face's cancellation tests. Threads of a test may call at once; each call is a
task of its own on the one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from .._core.ramp import Ramp
from ..client import Client
from ..instrumentation import Instrumentation

if TYPE_CHECKING:
    from .._core.listing import StoredSemaphore
    from .._core.position import Position
    from .._core.status import Status
    from .._permit import PermitState
    from .._revoke import Revoked
    from ..aio import AsyncBackend, AsyncMultiPermit, AsyncPermit, AsyncSemaphore, AsyncTransaction
    from ..backend import Backend, SessionState, Write

T = TypeVar("T")

__all__ = ["BlockingAsyncBackend", "Face", "LoopThread", "store_backend"]


class Face(enum.Enum):
    """Which face a test drives: the blocking one, or asyncio through a blocking view."""

    SYNC = "sync"
    ASYNC = "async"


@contextlib.contextmanager
def _sigint_handled_by(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """SIGINT calls ``handler`` instead of raising, in the main thread (the only one a
    SIGINT reaches); elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class LoopThread:
    """An event loop running in a daemon thread; :meth:`run` awaits a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="sr-test-loop")
        self._thread.daemon = True
        self._thread.start()

    def run(
        self,
        coro: Coroutine[Any, Any, T],
        undo: Callable[[T], Coroutine[Any, Any, Any]] | None = None,
    ) -> T:
        """The coroutine's result (or exception). Interrupted (SIGINT or
        ``_thread.interrupt_main()`` in the main thread), the task is cancelled and waited
        for, then ``KeyboardInterrupt`` is raised; if the task had finished with a result
        all the same, ``undo(result)`` is awaited first (an acquire's permit is released:
        the interrupt reached the caller, who will never see it).

        The interrupt is held back from the moment the task is scheduled until its
        outcome is known: one landing between the two (in ``run_coroutine_threadsafe``,
        or just after the result came back) would otherwise orphan a granted permit.
        """
        done = threading.Event()
        outcome: list[tuple[bool, Any]] = []
        tasks: list[asyncio.Task[None]] = []
        cancelled_early: list[bool] = []

        async def runner() -> None:
            try:
                if cancelled_early:  # interrupted before the task existed
                    coro.close()
                    raise asyncio.CancelledError
                tasks.append(asyncio.current_task())  # type: ignore[arg-type]
                outcome.append((True, await coro))
            except BaseException as exc:  # CancelledError included: reported below
                outcome.append((False, exc))
            finally:
                done.set()

        def cancel() -> None:  # on the loop: the task is known there, or not yet started
            if tasks:
                tasks[0].cancel()
            else:
                cancelled_early.append(True)

        interrupted: list[bool] = []

        def on_interrupt(signum: int, frame: object) -> None:
            if not interrupted:
                interrupted.append(True)
                self.loop.call_soon_threadsafe(cancel)

        scheduled = False
        try:
            with _sigint_handled_by(on_interrupt):
                asyncio.run_coroutine_threadsafe(runner(), self.loop)
                scheduled = True
                done.wait()
                ok, value = outcome[0]
                if interrupted:
                    if ok and undo is not None:
                        asyncio.run_coroutine_threadsafe(undo(value), self.loop).result()
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            if not scheduled and not done.is_set():  # interrupted before the handler was in
                coro.close()
            raise
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class BlockingAsyncBackend:
    """The sync face's ``Backend`` calls, made on an :class:`AsyncBackend`."""

    def __init__(self, backend: AsyncBackend, loop: LoopThread) -> None:
        self.aio = backend
        self.store_backend: Backend = backend.backend
        self._loop = loop
        self.owner = backend.owner

    def semaphore(
        self,
        name: str,
        capacity: int | None = None,
        *,
        adopt_capacity: bool = False,
        create: bool = True,
    ) -> BlockingSemaphore:
        sem = self.aio.semaphore(name, capacity, adopt_capacity=adopt_capacity, create=create)
        self._loop.run(sem.open())  # the sync face opens at once: so do we
        return BlockingSemaphore(sem, self._loop)

    def status(self, name: str) -> Status:
        return self._loop.run(self.aio.status(name))

    def acquire_all(
        self, weights: Any, timeout: float | None = None, blocking: bool = True
    ) -> BlockingMultiPermit:
        if isinstance(weights, dict):  # the views given stand for their semaphores
            weights = {getattr(w, "aio", w): k for w, k in weights.items()}

        async def acquired() -> BlockingMultiPermit:  # the view is made before it returns
            return BlockingMultiPermit(
                await self.aio.acquire_all(weights, timeout, blocking), self._loop
            )

        return self._loop.run(acquired(), undo=lambda permit: permit.aio.release())

    def existing_semaphore(self, name: str) -> AsyncSemaphore:
        return self.aio.existing_semaphore(name)

    def instrument(self, instrumentation: Instrumentation) -> None:
        self.aio.instrument(instrumentation)

    def read(self, key: str) -> bytes | None:
        return self._loop.run(self.aio.read(key))

    def list(self) -> tuple[StoredSemaphore, ...]:
        return self._loop.run(self.aio.list())

    def delete_semaphore(self, name: str) -> None:
        self._loop.run(self.aio.delete_semaphore(name))

    def data_key(self, semaphore: str, name: str = "data") -> str:
        return self.aio.data_key(semaphore, name)

    @property
    def session_state(self) -> SessionState:
        return self.aio.session_state

    def describe(self) -> str:
        return self.aio.describe()

    def close(self) -> None:
        self._loop.run(self.aio.close())

    def __getattr__(self, name: str) -> Any:
        # the store's own verbs (the memory backend's disconnect(), a client object...)
        return getattr(self.store_backend, name)

    def __enter__(self) -> BlockingAsyncBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<BlockingAsyncBackend {self.describe()}>"


class BlockingSemaphore:
    """The sync face's ``Semaphore`` calls, made on an :class:`AsyncSemaphore`."""

    def __init__(self, semaphore: AsyncSemaphore, loop: LoopThread) -> None:
        self.aio = semaphore
        self._loop = loop
        self.owner = semaphore.owner

    @property
    def name(self) -> str:
        return self.aio.name

    @property
    def capacity(self) -> int:
        capacity = self.aio.capacity
        assert capacity is not None  # opened
        return capacity

    def acquire(
        self,
        permits: int = 1,
        timeout: float | None = None,
        blocking: bool = True,
        *,
        watch_entry: bool = False,
        slot: bool = False,
        on_position: Callable[[Position], object] | None = None,
        position_interval: float = 1.0,
    ) -> BlockingPermit:
        async def acquired() -> BlockingPermit:  # the view is made before the call returns
            acquiring = self.aio.acquire(
                permits,
                timeout,
                blocking,
                watch_entry=watch_entry,
                slot=slot,
                on_position=on_position,
                position_interval=position_interval,
            )
            return BlockingPermit(self, await acquiring, self._loop)

        return self._loop.run(acquired(), undo=lambda permit: permit.aio.release())

    def status(self) -> Status:
        return self._loop.run(self.aio.status())

    def set_capacity(
        self,
        capacity: int,
        *,
        ramp: Ramp | None = None,
        on_step: Callable[[int, int], None] | None = None,
    ) -> None:
        self._loop.run(self.aio.set_capacity(capacity, ramp=ramp, on_step=on_step))

    def resume_ramp(self, *, on_step: Callable[[int, int], None] | None = None) -> bool:
        return self._loop.run(self.aio.resume_ramp(on_step=on_step))

    def cancel_ramp(self) -> bool:
        return self._loop.run(self.aio.cancel_ramp())

    def drain(self, *, wait: bool = False, timeout: float | None = None) -> Status | None:
        return self._loop.run(self.aio.drain(wait=wait, timeout=timeout))

    def resume(self) -> None:
        self._loop.run(self.aio.resume())

    def revoke(self, **target: Any) -> Revoked:
        return self._loop.run(self.aio.revoke(**target))

    def __repr__(self) -> str:
        return f"<BlockingSemaphore {self.name!r}>"


class _LostView:
    """``permit.lost`` (or ``revoke_requested``) as a ``threading.Event`` reader."""

    def __init__(self, event: asyncio.Event, loop: LoopThread) -> None:
        self._event = event
        self._loop = loop

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        async def wait() -> bool:
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except TimeoutError:
                return False
            return True

        return self._loop.run(wait())


class _BlockingHeld:
    """What both blocking permit views share (``aio``: the asyncio permit)."""

    aio: AsyncPermit | AsyncMultiPermit

    def __init__(self, permit: AsyncPermit | AsyncMultiPermit, loop: LoopThread) -> None:
        self.aio = permit
        self._loop = loop
        self.key = permit.key
        self.token = permit.token
        self.slots = permit.slots
        self.owner = permit.owner
        self.lost = _LostView(permit.lost, loop)
        self.revoke_requested = _LostView(permit.revoke_requested, loop)

    @property
    def state(self) -> PermitState:
        return self.aio.state

    def check(self) -> None:
        self.aio.check()

    def release(self) -> None:
        self._loop.run(self.aio.release())

    def transaction(self) -> BlockingTransaction:
        return BlockingTransaction(self.aio.transaction(), self._loop)

    def __enter__(self: H) -> H:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<Blocking{self.aio!r}>"


H = TypeVar("H", bound=_BlockingHeld)


class BlockingPermit(_BlockingHeld):
    """The sync face's ``Permit`` calls, made on an :class:`AsyncPermit`."""

    def __init__(self, semaphore: BlockingSemaphore, permit: AsyncPermit, loop: LoopThread) -> None:
        super().__init__(permit, loop)
        self.semaphore = semaphore
        self.permits = permit.permits


class BlockingMultiPermit(_BlockingHeld):
    """The sync face's ``MultiPermit`` calls, made on an :class:`AsyncMultiPermit`."""

    def __init__(self, permit: AsyncMultiPermit, loop: LoopThread) -> None:
        super().__init__(permit, loop)
        self.weights, self.keys, self.tokens = permit.weights, permit.keys, permit.tokens


class BlockingTransaction:
    def __init__(self, transaction: AsyncTransaction, loop: LoopThread) -> None:
        self.aio = transaction
        self._loop = loop

    @property
    def writes(self) -> list[Write]:
        return self.aio.writes

    def create(self, key: str, value: bytes = b"") -> BlockingTransaction:
        self.aio.create(key, value)
        return self

    def set(self, key: str, value: bytes) -> BlockingTransaction:
        self.aio.set(key, value)
        return self

    def delete(self, key: str) -> BlockingTransaction:
        self.aio.delete(key)
        return self

    def commit(self) -> None:
        self._loop.run(self.aio.commit())


def store_backend(backend: Any) -> Any:
    """The store's :class:`~semaphore_recipes.backend.Backend` behind ``backend``: a
    :class:`~semaphore_recipes.Client`, a :class:`BlockingAsyncBackend`, or the store's
    itself (the harness's verbs act on the store's)."""
    if isinstance(backend, BlockingAsyncBackend):
        return backend.store_backend
    if isinstance(backend, Client):
        return backend.backend
    return backend
