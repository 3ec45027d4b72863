"""The store interface: a session with a coordination store, as a backend implements
it (:class:`Backend`); users hold it through a face's handle (``Client``,
``aio.AsyncBackend``).

What a backend does on connection loss and expiry: it publishes session changes to the
permits, tells waiters to enter the queue again when their entries died with a
session (:meth:`Backend.requeue_waiters`), and ends everything with
:meth:`Backend.fail` when it can never reach the store again.
"""

from __future__ import annotations

import logging
import os
import socket
from abc import abstractmethod
from collections.abc import Sequence
from types import TracebackType
from typing import ClassVar, TypeVar, final

from .._core.deadline import Deadline
from .._core.listing import StoredSemaphore
from .._core.protocol import (
    Enqueued,
)
from .._url import ServiceURL
from ..errors import NotSupported
from ..instrumentation import NO_INSTRUMENTATION, Instrumentation
from .capabilities import (
    CLIENT_ADMISSION_HOOKS,
    DRAIN_HOOKS,
    HOOKS,
    PEEK_HOOKS,
    RAMP_HOOKS,
    REVOKE_HOOKS,
    SLOT_HOOKS,
    Capabilities,
    Capability,
)
from .driver import QueueDriver
from .fenced import FencedTransaction
from .hub import SessionHub
from .runner import Program, Runner
from .session import SessionState
from .waiter import Waiter

log = logging.getLogger("semaphore_recipes")
B = TypeVar("B", bound="Backend")


def default_owner() -> str:
    """What a backend's entries say made them, unless ``connect(owner=...)``."""
    return f"{socket.gethostname()}:{os.getpid()}"


# ---- the backend ---------------------------------------------------------------------------

#: what NotSupported names when a backend lacks ``acquire_all``'s hooks
MULTI = Capability.ACQUIRE_ALL.value


class Backend(SessionHub, Runner):
    """A session with a coordination store: opens its semaphores' queues and runs
    their programs (:class:`Runner`).

    Made by :func:`semaphore_recipes.connect` (the sync face wraps it in a
    ``Client``) or ``semaphore_recipes.aio.connect`` (in an ``AsyncBackend``).
    ``request_timeout`` (seconds) bounds every call but a waiting acquire. ``close()``
    ends the session: the store removes the backend's entries with it (how soon: the
    backend's docs).

    For backend authors: the ``register_waiter``/``add_permit_listener`` bookkeeping is
    done here; a subclass reports its session with :meth:`publish`,
    :meth:`requeue_waiters` and :meth:`fail`.
    """

    #: The URL scheme (``zookeeper``, ``etcd``, ``memory``): set by each subclass.
    scheme: ClassVar[str]
    #: The class of the backend's queues (what ``open_queue`` makes), whose hooks the
    #: capabilities' check reads.
    queue_type: ClassVar[type[QueueDriver] | None] = None

    def __init__(self, *, owner: str, request_timeout: float) -> None:
        self.owner = owner
        self.request_timeout = request_timeout
        SessionHub.__init__(self)
        #: told of every acquire and permit of both faces (``instrument()``)
        self.instrumentation: Instrumentation = NO_INSTRUMENTATION

    # -- made from a URL (by connect) --
    @classmethod
    @abstractmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> Backend:
        """Open a backend for ``url``: ValueError on a parameter it does not take (before
        any I/O), BackendUnavailable when the store does not answer in time,
        AuthenticationFailed when it refuses the credentials."""

    @classmethod
    def from_client(cls, client: object, *, owner: str | None = None, **options: str) -> Backend:
        """A backend over a client object the caller made (``registry`` lists which
        client types a backend takes); TypeError by default."""
        raise TypeError(f"the {cls.scheme} backend takes no client object")

    def instrument(self, instrumentation: Instrumentation) -> None:
        """Report the acquires and permits of every semaphore of this backend (both
        faces) to ``instrumentation`` from now on, in place of the one before
        (:mod:`semaphore_recipes.instrumentation`; ``semaphore_recipes.prometheus``
        gives Prometheus metrics). No I/O."""
        if not isinstance(instrumentation, Instrumentation):
            raise TypeError(
                f"instrument() takes an Instrumentation, not {type(instrumentation).__name__}"
            )
        self.instrumentation = instrumentation
        instrumentation.attached(self)

    @abstractmethod
    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[QueueDriver]:
        """Open the queue driver of semaphore ``name`` (arguments already validated):
        create the semaphore if ``create`` and it is missing, agree on the capacity
        (CapacityMismatch, SemaphoreNotFound), within the request timeout."""

    @abstractmethod
    def describe(self) -> str:
        """Where this backend is, for people: ``etcd at h1:2379 (prefix /app/)``; never
        a password or a token (:func:`redact_url` masks them in a URL)."""

    @property
    @abstractmethod
    def session_state(self) -> SessionState:
        """The session's state right now."""

    @abstractmethod
    def session_vouched(self, contact: float) -> bool:
        """Is the session surely alive now (``time.monotonic``), with a margin to spare,
        given that a call of ours sent at ``contact`` was answered? A store where every
        call keeps the session alive counts from ``contact``; one renewing a lease counts
        from its last renewal sent that the store confirmed. Time alone decides: a lost
        connection does not end a session before its timeout. No I/O: an admitted waiter
        asks it before it holds, and :meth:`QueueDriver.confirm` when it says no."""

    @abstractmethod
    def reading(self, key: str) -> Program[bytes | None]:
        """The value of ``key`` in the store's own key space (the one fenced
        transactions write), or None; within the request timeout."""

    @abstractmethod
    def data_key(self, semaphore: str, name: str = "data") -> str:
        """A key for application data ``name`` kept with semaphore ``semaphore`` (under
        its node or prefix, apart from its entries; removed by :meth:`deleting_semaphore`),
        for fenced transactions. InvalidName on a bad name (``validate_name``)."""

    @abstractmethod
    def deleting_semaphore(self, name: str) -> Program[None]:
        """Delete what is stored of semaphore ``name`` (validated): its capacity, its
        entries and its data keys; nothing if it does not exist."""

    def listing(self) -> Program[tuple[StoredSemaphore, ...]]:
        """The semaphores stored in this backend's namespace (root, prefix, schema),
        sorted by name, each with its stored capacity, within the request timeout (a
        store without it: NotSupported, before any I/O). A semaphore being created or
        deleted meanwhile may be in it or not."""
        raise NotSupported(self.scheme, "list its semaphores", "list")

    @abstractmethod
    def close(self) -> None:
        """End the session (its entries go with it); within the request timeout. Held
        permits go LOST (``lost`` set) and acquires waiting on other threads or tasks
        raise BackendUnavailable, as :meth:`fail` does."""

    def __enter__(self: B) -> B:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"

    #: What this store can do (:mod:`.capabilities`), declared once; the faces and the
    #: CLI read it before any I/O. Declaring a capability obliges the class to define
    #: its hooks (checked when the class is made): ``async_face``, ``run_async`` and the
    #: two ``*_async`` methods below; ``acquire_all``, the three hooks further down;
    #: ``slots``, its ``queue_type`` defines ``list_slots``/``take_slot`` (not with
    #: ``admission_slots``: its admission answers carry them), deletes an entry's slot
    #: records in the same request as the entry and shows them in ``status()``
    #: (``EntryStatus.slots``).
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.capabilities
        needed = [
            hook
            for capability, hooks in HOOKS.items()
            if declared.has(capability)
            for hook in hooks
        ]
        missing = [hook for hook in needed if getattr(cls, hook) is getattr(Backend, hook)]
        queue = cls.queue_type
        slot_steps = declared.slots and not declared.admission_slots
        queue_hooks: tuple[str, ...] = SLOT_HOOKS if slot_steps else ()
        if not declared.server_admission:
            queue_hooks += CLIENT_ADMISSION_HOOKS
        if declared.drain and queue is not None:  # (a queue class set later: not checked)
            queue_hooks += DRAIN_HOOKS
        if declared.ramp and queue is not None:
            queue_hooks += RAMP_HOOKS
        if declared.revoke and queue is not None:
            queue_hooks += REVOKE_HOOKS
        if declared.peek_before_arming:
            queue_hooks += PEEK_HOOKS
        if queue_hooks and queue is None:
            missing.append("queue_type")
        elif queue is not None:
            missing += [
                f"{queue.__name__}.{hook}"
                for hook in queue_hooks
                if getattr(queue, hook) is getattr(QueueDriver, hook)
            ]
        if missing:
            raise TypeError(
                f"{cls.__name__} declares {declared} but does not define {', '.join(missing)}"
            )

    @classmethod
    async def from_url_async(cls, url: ServiceURL, *, owner: str | None = None) -> Backend:
        """:meth:`from_url` for the asyncio face, connecting without blocking the loop.
        The backend it returns runs its programs with ``run_async`` only."""
        raise NotSupported(cls.scheme, Capability.ASYNC_FACE.value, "async_face")

    async def close_async(self) -> None:
        """:meth:`close`, awaited."""
        raise NotSupported(self.scheme, Capability.ASYNC_FACE.value, "async_face")

    # -- several semaphores at once (``acquire_all``, docs/design.md section 2): a
    # backend that can create entries in several queues in one atomic request declares
    # ``Capabilities(acquire_all=True)`` and defines the hooks below.
    def check_together(self, names: Sequence[str]) -> None:
        """NotSupported, before any I/O, when semaphores ``names`` cannot be taken in
        one ``acquire_all`` request on this store (Redis Cluster: not of one hash
        slot); every other store takes any set."""

    def enqueue_all(
        self, queues: Sequence[tuple[QueueDriver, Waiter]], deadline: Deadline
    ) -> Program[dict[str, Enqueued]]:
        """The EnqueueAll step: create a fresh entry of ``waiter.weight`` in each
        driver's queue, all in **one** atomic request (so every queue orders two such
        requests alike), then list each queue's lower entries; answers by semaphore
        name. Waiter bookkeeping (``new_generation``, ``creating``, ``created``) as
        :meth:`QueueDriver.enqueue` does it; AcquireTimeout when ``deadline`` passes."""
        raise NotSupported(self.scheme, MULTI, "acquire_all")

    @final
    def delete_entries(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> Program[None]:
        """What the faces run to remove an ``acquire_all``'s entries (:meth:`delete_all`),
        marks kept for a capacity decrease dropped first."""
        for driver, waiter in queues:
            if waiter.key is not None:
                driver.forget_mark(waiter.key)
        yield from self.delete_all(queues)

    def delete_all(self, queues: Sequence[tuple[QueueDriver, Waiter]]) -> Program[None]:
        """Delete each waiter's entry (its key, or found by its entry id after a lost
        create reply) in one atomic request; never raises (background retry, as
        :meth:`QueueDriver.remove` does)."""
        raise NotSupported(self.scheme, MULTI, "acquire_all")

    def transaction_all(
        self, entries: Sequence[tuple[QueueDriver, str]], token: int
    ) -> FencedTransaction:
        """A transaction fenced on every ``(driver, entry key)``, all created with
        ``token`` (one atomic create gives them one)."""
        raise NotSupported(self.scheme, MULTI, "acquire_all")
