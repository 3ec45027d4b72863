"""The instrumentation hook: what both faces report about acquires and permits.

An :class:`Instrumentation` is attached to a backend with ``backend.instrument(obs)``
(``AsyncBackend.instrument`` for the asyncio face). The shared acquire program
(``_acquire``) and the shared permit state (``_permit``) call it, so the sync and the
asyncio face report the same events once, whatever the store:

* ``acquire_started`` / ``acquire_ended``: a request entered the queue; it ended with an
  :class:`AcquireOutcome` after so many seconds (the wait, from the call to the grant or
  to the way out); ``acquire_granted`` then tells a grant's fencing token;
* ``permit_held`` / ``permit_dropped``: permits granted to this process; given back, or
  lost (the session or lease ended, or the entry was deleted: :class:`LostReason`);
* ``queue_listed``: a waiter's view of the queue went stale and the queue was listed
  again (a cost of contended grants on ZooKeeper, etcd and the memory store);
* ``removal_deferred``: an acquire ended without a permit while the store had not
  confirmed its entry's removal, which goes on in the background (``_leave``).

The base class does nothing: subclass it and override what you need.
:mod:`semaphore_recipes.prometheus` (the ``[metrics]`` extra) is one, built on
``prometheus_client``. Hooks are called from the caller's thread, the event loop, or a
backend's own threads (a session expiry), so they must be quick and thread-safe; an
exception they raise is logged and dropped, never raised into an acquire or a release.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import AcquireTimeout, WouldBlock

if TYPE_CHECKING:
    from .backend import Backend

log = logging.getLogger("semaphore_recipes")

__all__ = ["AcquireOutcome", "Instrumentation", "LostReason", "outcome_of", "report"]


class AcquireOutcome(enum.Enum):
    """How an acquire ended."""

    GRANTED = "granted"
    TIMEOUT = "timeout"  #: AcquireTimeout
    WOULD_BLOCK = "would_block"  #: WouldBlock (``blocking=False``)
    CANCELLED = "cancelled"  #: the task was cancelled, or the thread interrupted (Ctrl-C)
    ERROR = "error"  #: any other exception (BackendUnavailable, PermissionDenied...)


class LostReason(enum.Enum):
    """Why a held permit was lost."""

    SESSION = "session"  #: the session or lease ended (or the client can never reconnect)
    #: the entry was deleted; on etcd also a lease revoked or expired, when the entry
    #: watch (``watch_entry``) sees its keys go before the keepalive sees the lease gone
    ENTRY = "entry"


class Instrumentation:
    """Receives the faces' events; every method does nothing here."""

    def attached(self, backend: Backend) -> None:
        """``backend.instrument(self)`` was called (e.g. to read its session state)."""

    def acquire_started(self, name: str, permits: int) -> None:
        """A request for ``permits`` of semaphore ``name`` starts waiting."""

    def acquire_ended(
        self, name: str, permits: int, outcome: AcquireOutcome, seconds: float
    ) -> None:
        """That request ended with ``outcome``, ``seconds`` after it started."""

    def acquire_granted(self, name: str, permits: int, token: int, seconds: float) -> None:
        """That request was granted, with fencing token ``token``: called right after
        ``acquire_ended(..., GRANTED, seconds)``, in the same thread or task."""

    def permit_held(self, name: str, permits: int) -> None:
        """``permits`` of ``name`` are held by this process from now on."""

    def permit_dropped(self, name: str, permits: int, lost: LostReason | None) -> None:
        """Those permits are no longer held: released (``lost`` None) or lost."""

    def permit_revoked(self, name: str, permits: int) -> None:
        """A holder of ``permits`` of ``name`` in this process was asked to give them
        back (``Semaphore.revoke``): its ``revoke_requested`` is set now."""

    def queue_listed(self, name: str) -> None:
        """The entries ahead of a waiter of ``name`` in this process were listed
        again, one request to the store: its view went stale (a predecessor left
        before it was seen held; docs/design.md section 9). A re-list answered from
        what the process already knows of the queue is not one."""

    def removal_deferred(self, name: str) -> None:
        """An acquire of ``name`` ended without a permit before the store confirmed
        its entry's removal: the removal goes on in the background (the store did not
        answer in time; the session's end removes the entry in any case)."""


NO_INSTRUMENTATION = Instrumentation()


def outcome_of(exc: BaseException) -> AcquireOutcome:
    """The outcome of an acquire that raised ``exc``."""
    if isinstance(exc, WouldBlock):
        return AcquireOutcome.WOULD_BLOCK
    if isinstance(exc, AcquireTimeout):
        return AcquireOutcome.TIMEOUT
    if not isinstance(exc, Exception):  # CancelledError, KeyboardInterrupt, GeneratorExit
        return AcquireOutcome.CANCELLED
    return AcquireOutcome.ERROR


def report(hook: Callable[..., None], *args: object) -> None:
    """Call one hook; what it raises is logged, not passed on."""
    try:
        hook(*args)
    except Exception:
        log.exception("instrumentation hook %s failed", getattr(hook, "__qualname__", hook))
