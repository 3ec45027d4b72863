"""The memory backend: ``memory://NAME``, a session of an in-process store.

Every ``connect("memory://NAME")`` in a process opens the same store NAME (``memory://``
the default one), each backend its own session, as clients of one server would. No
network and no optional dependency: for users' unit tests, and the proof that the
backend seam (:mod:`semaphore_recipes.backend`) is complete.

What a test can do to a session, as a server or a network would:

* :meth:`MemoryBackend.expire_session`: the session ends as on a server: its entries
  are deleted (other sessions' waiters see it), its held permits go LOST, its waiters
  enter the queue again, and the backend goes on with a new session.
* :meth:`MemoryBackend.disconnect` / :meth:`MemoryBackend.reconnect`: held permits are
  SUSPENDED, then HELD again. While disconnected, every request waits for the
  connection until its bound (the request timeout: BackendUnavailable; a waiting
  acquire's deadline: AcquireTimeout); releases and held marks are sent on reconnect.

``close()`` ends the session (its entries are deleted at once, held permits go LOST,
waiting acquires raise BackendUnavailable); later calls raise BackendUnavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import TypeVar

from ..backend import (
    DEFAULT_REQUEST_TIMEOUT,
    RESTORED,
    SUSPENDED,
    Backend,
    Capabilities,
    Deadline,
    Enqueued,
    QueueDriver,
    ServiceURL,
    SessionState,
    StoredSemaphore,
    Waiter,
    by_name,
    call_with_sigint_held,
    default_owner,
    queues_of,
    quoted_url,
    run_program,
    run_program_async,
    session_lost,
    validate_name,
)
from ..errors import AcquireTimeout, BackendUnavailable, InvalidName
from .queue import Connected, MemoryQueue, enter_queues, leave_queues
from .store import MemoryStore, store_named
from .transaction import MemoryFencedTransaction

log = logging.getLogger("semaphore_recipes.memory")
T = TypeVar("T")

#: the parameters a memory:// URL may carry (docs/operations.md)
URL_PARAMETERS = frozenset({"request_timeout"})
_STORE_NAME = re.compile(r"[A-Za-z0-9._-]{0,128}")


class MemoryBackend(Backend):
    """Semaphores in the in-process store ``store``, over one session of it.

    Built by :func:`semaphore_recipes.connect` from a ``memory://NAME/prefix`` URL. The
    URL's path, if any, is the prefix of this backend's semaphores and data keys.
    """

    scheme = "memory"
    capabilities = Capabilities(
        async_face=True, slots=True, acquire_all=True, drain=True, ramp=True, revoke=True
    )
    queue_type = MemoryQueue

    def __init__(
        self,
        store: MemoryStore,
        *,
        prefix: str = "",
        owner: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        super().__init__(owner=owner or default_owner(), request_timeout=request_timeout)
        self.store = store
        self.prefix = prefix.rstrip("/")
        self._lock = threading.Lock()
        self._reachable = threading.Condition(self._lock)  # connected again, or closed
        self._connected = True
        self._closed = False
        self._pending: list[Callable[[], object]] = []  # sent on reconnect
        # requests of the asyncio face waiting for the connection: (their loop, a future)
        self._async_waits: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.session = store.open_session()

    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> MemoryBackend:
        """A backend for ``memory://NAME/prefix?request_timeout=S``. ValueError on any
        other parameter (a silently ignored setting is a wrong one), InvalidName on a
        store name outside ``A-Z a-z 0-9 . _ -``."""
        unknown = sorted(set(url.params) - URL_PARAMETERS)
        if unknown:
            raise ValueError(
                f"memory URL parameter(s) {', '.join(unknown)} not understood; "
                f"known: {', '.join(sorted(URL_PARAMETERS))}"
            )
        request_timeout = url.request_timeout()
        if not _STORE_NAME.fullmatch(url.netloc):
            raise InvalidName(
                f"invalid memory store name {quoted_url(url.netloc)}: use up to 128 "
                "characters from A-Z a-z 0-9 . _ -"
            )
        return cls(
            store_named(url.netloc), prefix=url.path, owner=owner, request_timeout=request_timeout
        )

    # ---- what a test does to the session ------------------------------------------------
    def expire_session(self) -> None:
        """End the session as a server expiring it would, and go on with a new one.

        Held permits go LOST, waiting acquires enter the queue again at the back with
        the new session, and the session's entries are deleted (waiters of other
        sessions are woken). Returns once all of them have been told."""
        with self._lock:
            self._check_open()
            old = self.session
            deliver = self.store.end_session(old)
            self.session = self.store.open_session()
        log.warning("memory session %x of store %r expired", old, self.store.name)
        # Permits and waiters first: a waiter woken by its own entries' deletion must
        # find the session's end already in its inbox.
        self.publish(session_lost("the memory session expired"))
        self.requeue_waiters(lambda entry_id: _made_on(entry_id, old))
        deliver()

    def disconnect(self) -> None:
        """Lose the connection, the session staying alive: held permits are SUSPENDED
        and requests wait for :meth:`reconnect` (each until its own bound)."""
        with self._lock:
            self._check_open()
            if not self._connected:
                return
            self._connected = False
        log.warning("memory backend of store %r disconnected", self.store.name)
        self.publish(SUSPENDED)

    def reconnect(self) -> None:
        """Connect again to the same session: permits are HELD again, waiting requests
        go on, and the releases and held marks made meanwhile are sent."""
        with self._lock:
            self._check_open()
            if self._connected:
                return
            self._connected = True
            pending, self._pending = self._pending, []
            self._reachable.notify_all()
            self._wake_async_waits()
        log.info("memory backend of store %r reconnected", self.store.name)
        self.publish(RESTORED)
        for send in pending:
            send()

    # ---- what the queues use ------------------------------------------------------------
    def request(self, deadline: Deadline | None = None) -> int:
        """The session to send a request on, once connected. Waits while disconnected:
        BackendUnavailable when the request timeout passes (or the backend is closed),
        AcquireTimeout when ``deadline`` (a waiting acquire's) passes."""
        limit = deadline or Deadline(self.request_timeout, time.monotonic)
        with self._lock:
            while (session := self._session_within(limit, deadline)) is None:
                self._reachable.wait(limit.remaining())
            return session

    async def request_async(self, deadline: Deadline | None = None) -> int:
        """:meth:`request`, awaited: the loop goes on while disconnected."""
        limit = deadline or Deadline(self.request_timeout, time.monotonic)
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if (session := self._session_within(limit, deadline)) is not None:
                    return session
                woken: asyncio.Future[None] = loop.create_future()
                self._async_waits.append((loop, woken))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(woken), limit.remaining())

    def _session_within(self, limit: Deadline, deadline: Deadline | None) -> int | None:
        """(Under the lock.) The session if connected, None to wait on, or the error of a
        closed backend or of ``limit`` passed."""
        self._check_open()
        if self._connected:
            return self.session
        if limit.expired():
            if deadline is not None:
                raise AcquireTimeout(f"memory store {self.store.name!r}: disconnected")
            raise BackendUnavailable(
                f"memory store {self.store.name!r} unreachable: disconnected "
                f"(request timeout {self.request_timeout:g} s)"
            )
        return None

    def _wake_async_waits(self) -> None:
        """(Under the lock.) Connected again, or closed: wake the awaiting requests."""
        waits, self._async_waits = self._async_waits, []
        for loop, woken in waits:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                loop.call_soon_threadsafe(_resolve, woken)

    def run(self, program: Generator[object, object, T]) -> T:
        """Run a queue's program, blocking (each request waits for the connection)."""
        return run_program(program, self._answer)

    async def run_async(self, program: Generator[object, object, T]) -> T:
        """Run a queue's program from an event loop."""
        return await run_program_async(program, self._answer_async)

    def _answer(self, pending: object) -> object:
        assert isinstance(pending, Connected)
        return self.request(pending.deadline)

    async def _answer_async(self, pending: object) -> object:
        assert isinstance(pending, Connected)
        return await self.request_async(pending.deadline)

    def send(self, write: Callable[[], object]) -> None:
        """Send a write whose reply nobody waits for (a release, a held mark): now, or on
        reconnect; dropped once the backend is closed (its entries are gone)."""
        with self._lock:
            if self._closed:
                return
            if not self._connected:
                self._pending.append(write)
                return
        write()

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailable(f"the memory backend of store {self.store.name!r} is closed")

    # ---- what the base runs (each a program: ``run`` or ``run_async``) ------------------
    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Generator[object, object, MemoryQueue]:
        queue = MemoryQueue(self, name)
        return queue.open(capacity, adopt_capacity=adopt_capacity, create=create)

    def reading(self, key: str) -> Generator[object, object, bytes | None]:
        yield Connected(None)
        return self.store.read(key)

    def deleting_semaphore(self, name: str) -> Generator[object, object, None]:
        path = self.semaphore_path(name)
        yield Connected(None)
        call_with_sigint_held(lambda: self.store.delete_semaphore(path))

    def listing(self) -> Generator[object, object, tuple[StoredSemaphore, ...]]:
        yield Connected(None)
        return by_name(self.store.capacities(self.prefix).items())

    def enqueue_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> Generator[object, object, dict[str, Enqueued]]:
        return enter_queues(self, queues, deadline)

    def delete_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]]
    ) -> Generator[object, object, None]:
        return leave_queues(self, queues)

    def transaction_all(
        self, entries: Sequence[tuple[QueueDriver, str]], token: int
    ) -> MemoryFencedTransaction:
        (first, key), *others = queues_of(MemoryQueue, entries)
        return MemoryFencedTransaction(first, key, token, others)

    @classmethod
    async def from_url_async(cls, url: ServiceURL, *, owner: str | None = None) -> MemoryBackend:
        return cls.from_url(url, owner=owner)  # nothing to connect to: no I/O

    async def close_async(self) -> None:
        self.close()  # in-process: it never waits

    def semaphore_path(self, name: str) -> str:
        """Where the semaphore ``name`` is in the store."""
        return f"{self.prefix}/{name}"

    def describe(self) -> str:
        where = f" (prefix {self.prefix})" if self.prefix else ""
        return f"memory store {self.store.name!r}{where}"

    @property
    def session_state(self) -> SessionState:
        with self._lock:
            if self._closed:
                return SessionState.CLOSED
            return SessionState.CONNECTED if self._connected else SessionState.SUSPENDED

    def session_vouched(self, contact: float) -> bool:
        # (an in-process session has no clock to run out: its end is told at once)
        return True

    @property
    def closed(self) -> bool:
        return self._closed

    def data_key(self, semaphore: str, name: str = "data") -> str:
        return f"{self.semaphore_path(validate_name(semaphore))}/data/{validate_name(name)}"

    def close(self) -> None:
        """End the session: its entries are deleted at once, held permits go LOST and
        waiting acquires raise BackendUnavailable. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._pending.clear()
            self._reachable.notify_all()
            self._wake_async_waits()
            deliver = self.store.end_session(self.session)
        self.fail("the memory backend was closed")
        deliver()


def _resolve(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


def _made_on(entry_id: str | None, session: int) -> bool:
    return entry_id is not None and MemoryStore.session_of(entry_id) == session
