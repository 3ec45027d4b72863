""":class:`Client`: what :func:`semaphore_recipes.connect` returns, the sync face's handle
on a session with a store.

It opens semaphores (``client.semaphore(name, capacity)``), takes several at once
(``client.acquire_all``), reads their status, and closes the session; every call runs
the store's programs blocking, through its :class:`~semaphore_recipes.backend.Backend`
(``client.backend``), as :class:`semaphore_recipes.aio.AsyncBackend` awaits the same
ones. Connection loss and expiry: see :mod:`semaphore_recipes.semaphore`;
``client.session_state`` says where the session stands. ``close()`` ends the session:
the store removes its entries with it (how soon: the backend's docs).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from ._core.listing import StoredSemaphore
from ._core.names import validate_name, validate_open_capacity
from ._core.status import Status
from .backend import Backend, Capabilities, SessionState
from .instrumentation import Instrumentation
from .multi import MultiPermit, Wanted, acquire_all
from .semaphore import Semaphore

__all__ = ["Client"]


class Client:
    """A session with a coordination store and the semaphores opened over it.

    Made by :func:`semaphore_recipes.connect`. ``request_timeout`` (seconds) bounds every
    call but a waiting acquire. ``backend`` is the store's own object: its test verbs
    (the memory store's ``expire_session()``) and client are there, and reachable from
    here too (``client.expire_session()``).
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.owner = backend.owner
        self.request_timeout = backend.request_timeout
        #: semaphores ``acquire_all`` opened by name, kept open (each holds a watch)
        self._opened_by_name: dict[str, Semaphore] = {}
        self._opened_lock = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:
        """What the store can do (:class:`~semaphore_recipes.backend.Capabilities`)."""
        return self.backend.capabilities

    def semaphore(
        self,
        name: str,
        capacity: int | None = None,
        *,
        adopt_capacity: bool = False,
        create: bool = True,
    ) -> Semaphore:
        """The semaphore ``name``; created with ``capacity`` if it does not exist.

        Raises CapacityMismatch if it is stored with another capacity (unless
        ``adopt_capacity``), InvalidName/ValueError on bad input before any I/O.
        With ``create=False`` nothing is written: an existing semaphore is opened
        (``capacity`` None: the stored one) and SemaphoreNotFound is raised when there
        is none; read permission is enough (``status()``, monitoring).
        PermissionDenied when the store refuses the user; BackendUnavailable when it
        does not answer within the request timeout.
        """
        validate_name(name)
        checked = validate_open_capacity(capacity, create)
        backend = self.backend
        opening = backend.open_queue(name, checked, adopt_capacity=adopt_capacity, create=create)
        return Semaphore(backend.run(opening), backend, self.owner)

    def status(self, name: str) -> Status:
        """The status of the existing semaphore ``name`` (SemaphoreNotFound if none);
        writes nothing."""
        return self.semaphore(name, create=False).status()

    def acquire_all(
        self,
        weights: Wanted,
        timeout: float | None = None,
        blocking: bool = True,
    ) -> MultiPermit:
        """Take ``weights[s]`` permits of each semaphore ``s`` at once, or none: see
        :func:`semaphore_recipes.multi.acquire_all`."""
        return acquire_all(
            self.backend, self.existing_semaphore, weights, timeout=timeout, blocking=blocking
        )

    def existing_semaphore(self, name: str) -> Semaphore:
        """The existing semaphore ``name``, opened once per client (``acquire_all``
        names them at every call: opening each time would cost a read and a capacity
        watch per call). SemaphoreNotFound when there is none."""
        with self._opened_lock:
            opened = self._opened_by_name.get(name)
        if opened is None:
            opened = self.semaphore(name, create=False)
            with self._opened_lock:
                opened = self._opened_by_name.setdefault(name, opened)
        return opened

    def instrument(self, instrumentation: Instrumentation) -> None:
        """See :meth:`semaphore_recipes.backend.Backend.instrument` (both faces)."""
        self.backend.instrument(instrumentation)

    def read(self, key: str) -> bytes | None:
        """The value of ``key`` in the store's own key space (the one fenced
        transactions write), or None; within the request timeout."""
        return self.backend.run(self.backend.reading(key))

    def data_key(self, semaphore: str, name: str = "data") -> str:
        """See :meth:`semaphore_recipes.backend.Backend.data_key`."""
        return self.backend.data_key(semaphore, name)

    def list(self) -> tuple[StoredSemaphore, ...]:
        """The semaphores stored in this backend's namespace, sorted by name, each with
        its capacity (``StoredSemaphore``); within the request timeout. Read-only."""
        return self.backend.run(self.backend.listing())

    def delete_semaphore(self, name: str) -> None:
        """Delete what is stored of semaphore ``name``: its capacity, its entries and its
        data keys; nothing if it does not exist. For tests, demos and operators, when
        nothing uses it: a holder learns its entry is gone at its next fenced commit (at
        once with ``watch_entry``), and a waiter may re-create the semaphore."""
        validate_name(name)
        self.backend.run(self.backend.deleting_semaphore(name))

    @property
    def session_state(self) -> SessionState:
        """The session's state right now."""
        return self.backend.session_state

    def describe(self) -> str:
        """Where the store is, for people (never a password)."""
        return self.backend.describe()

    def close(self) -> None:
        """End the session (its entries go with it); within the request timeout. Held
        permits go LOST (``lost`` set) and acquires waiting on other threads raise
        BackendUnavailable."""
        self.backend.close()

    def __getattr__(self, name: str) -> Any:
        # the store's own verbs (memory's expire_session(), a ZooKeeper client...)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.backend, name)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Client {self.describe()}>"
