""":class:`AsyncBackend` and :func:`connect`: a session with a store, for asyncio.

``await sr.aio.connect(url)`` (or ``async with sr.aio.connect(url) as backend:``) opens
the same kind of backend as ``sr.connect(url)``, connected without blocking the event
loop, and drives it through its asyncio hooks (``semaphore_recipes.backend``). URLs,
parameters and errors are the sync face's. Connection loss and expiry: as in the sync
face (``semaphore_recipes.semaphore``); ``backend.session_state`` says where it stands.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from types import TracebackType
from typing import Any

from .._core.deadline import validate_timeout
from .._core.listing import StoredSemaphore
from .._core.names import validate_name, validate_open_capacity
from .._core.status import Status
from ..backend import Backend, Capability, SessionState
from ..instrumentation import Instrumentation
from ..multi import check_supported, requested
from .multi import AsyncMultiPermit, acquiring_all
from .semaphore import Acquiring, AsyncSemaphore

__all__ = ["AsyncBackend", "connect"]


class AsyncBackend:
    """A session with a coordination store and the semaphores opened over it, for
    asyncio. ``backend`` is the store's :class:`~semaphore_recipes.backend.Backend`
    (its test verbs, such as the memory store's ``expire_session()``, are there)."""

    def __init__(self, backend: Backend) -> None:
        backend.capabilities.require(backend.scheme, Capability.ASYNC_FACE)
        self.backend = backend
        self.owner = backend.owner
        self.request_timeout = backend.request_timeout
        #: semaphores ``acquire_all`` opened by name, kept (each holds a watch)
        self._opened_by_name: dict[str, AsyncSemaphore] = {}

    def semaphore(
        self,
        name: str,
        capacity: int | None = None,
        *,
        adopt_capacity: bool = False,
        create: bool = True,
    ) -> AsyncSemaphore:
        """The semaphore ``name`` (created with ``capacity`` on first use if missing).
        InvalidName/ValueError/TypeError here, before any I/O; what opening raises
        (CapacityMismatch, SemaphoreNotFound, PermissionDenied, BackendUnavailable) at
        the first await on it (``await sem.open()`` to find out at once)."""
        validate_name(name)
        checked = validate_open_capacity(capacity, create)
        return AsyncSemaphore(self, name, checked, adopt_capacity=adopt_capacity, create=create)

    def acquire_all(
        self,
        weights: Mapping[str, int] | Mapping[AsyncSemaphore, int] | Mapping[Any, int],
        timeout: float | None = None,
        blocking: bool = True,
    ) -> Acquiring[AsyncMultiPermit]:
        """Take ``weights[s]`` permits of each semaphore ``s`` at once, or none:
        ``permit = await backend.acquire_all({...})`` or ``async with
        backend.acquire_all({...}) as permit:``. ``s`` is an :class:`AsyncSemaphore`
        or the name of an existing semaphore. The sync face's contract
        (:func:`semaphore_recipes.multi.acquire_all`): bad arguments raise here, before
        any I/O (NotSupported too); cancelling the awaiting task leaves no entry in any
        queue (``semaphore_recipes.aio.multi``)."""
        validate_timeout(timeout)
        named = requested(weights, _async_name)
        check_supported(self.backend, list(named), aio=True)
        return Acquiring(acquiring_all(self, named, timeout, blocking))

    def existing_semaphore(self, name: str) -> AsyncSemaphore:
        """The existing semaphore ``name`` as ``acquire_all`` names it, made once per
        backend (opened on first use: SemaphoreNotFound then if there is none)."""
        found = self._opened_by_name.get(name)
        if found is None:
            found = self._opened_by_name[name] = self.semaphore(name, create=False)
        return found

    def instrument(self, instrumentation: Instrumentation) -> None:
        """See :meth:`semaphore_recipes.Backend.instrument` (the same hook, both faces)."""
        self.backend.instrument(instrumentation)

    async def status(self, name: str) -> Status:
        """The status of the existing semaphore ``name`` (SemaphoreNotFound if none)."""
        return await self.semaphore(name, create=False).status()

    @property
    def session_state(self) -> SessionState:
        return self.backend.session_state

    def describe(self) -> str:
        return self.backend.describe()

    def data_key(self, semaphore: str, name: str = "data") -> str:
        """See :meth:`semaphore_recipes.Backend.data_key`."""
        return self.backend.data_key(semaphore, name)

    async def read(self, key: str) -> bytes | None:
        """See :meth:`semaphore_recipes.Backend.read`."""
        return await self.backend.run_async(self.backend.reading(key))

    async def list(self) -> tuple[StoredSemaphore, ...]:
        """See :meth:`semaphore_recipes.Client.list`."""
        return await self.backend.run_async(self.backend.listing())

    async def delete_semaphore(self, name: str) -> None:
        """See :meth:`semaphore_recipes.Backend.delete_semaphore`."""
        validate_name(name)
        await self.backend.run_async(self.backend.deleting_semaphore(name))

    async def close(self) -> None:
        """End the session (its entries go with it); within the request timeout."""
        await self.backend.close_async()

    async def __aenter__(self) -> AsyncBackend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncBackend {self.describe()}>"


class Connecting:
    """``connect()`` in progress: ``await`` it, or ``async with`` it (closed at the end)."""

    __slots__ = ("_backend", "_owner", "_params", "_target")

    def __init__(self, target: str, owner: str | None, params: dict[str, str]) -> None:
        self._target = target
        self._owner = owner
        self._params = params
        self._backend: AsyncBackend | None = None

    async def _connect(self) -> AsyncBackend:
        from .. import registry

        url = registry.parse_url(self._target)
        url.params.update(self._params)
        cls = registry.backend_class(url.scheme)
        cls.capabilities.require(url.scheme, Capability.ASYNC_FACE)
        return AsyncBackend(await cls.from_url_async(url, owner=self._owner))

    def __await__(self) -> Generator[Any, None, AsyncBackend]:
        return self._connect().__await__()

    async def __aenter__(self) -> AsyncBackend:
        self._backend = await self._connect()
        return self._backend

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._backend is not None:
            await self._backend.close()


def connect(target: str, *, owner: str | None = None, **options: str) -> Connecting:
    """Connect to a coordination service, for asyncio: ``await connect(url)`` or
    ``async with connect(url) as backend:``. The URL and ``options`` are those of
    :func:`semaphore_recipes.connect` (a client object is not taken here). ValueError
    on a malformed URL, an unknown scheme, or a backend without an asyncio face, before
    any I/O; BackendNotInstalled when the scheme's extras are missing;
    BackendUnavailable when no server answers."""
    if not isinstance(target, str):
        raise TypeError(f"connect() takes a URL, not {type(target).__name__}")
    params = {key: str(value) for key, value in options.items() if value is not None}
    return Connecting(target, owner, params)


def _async_name(what: object) -> str | None:
    return what.name if isinstance(what, AsyncSemaphore) else None
