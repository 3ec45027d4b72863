"""The backend seam: what a coordination store implements to carry the recipe.

A backend is one package with a :class:`Backend` subclass (the session, opening
semaphores, and the runner of its programs: :mod:`.runner`), a :class:`QueueDriver`
subclass (one semaphore's queue: the store's side of the protocol steps of
``_core.protocol``, each written once as a program) and a :class:`FencedTransaction`
subclass, plus one line in :mod:`semaphore_recipes.registry`; the class declares what
it can do once (``capabilities``). ``docs/design.md`` ("The backend contract") lists what the
store must offer; the contract suite that ships with the package
(``python -m pytest --pyargs semaphore_recipes.testing.contract --semaphore-store
SCHEME``) is what a backend must pass. ``semaphore_recipes.memory`` is a complete
backend written against this package alone.

What the faces rely on, on connection loss and expiry: a backend publishes
:class:`SessionEvent` values to the permits (SUSPENDED when the connection is lost and
the session may still be alive, RESTORED when the same session is back, LOST with a
reason when it has ended), tells waiters to enter the queue again
(:meth:`Backend.requeue_waiters`) when their entries died with a session, and ends
everything with :meth:`Backend.fail` when it can never reach the store again.
"""

from __future__ import annotations

from .._core.codec import EntryData
from .._core.deadline import Deadline
from .._core.listing import StoredSemaphore, by_name
from .._core.names import validate_capacity, validate_name
from .._core.program import run_program, run_program_async
from .._core.protocol import (
    CapacityChanged,
    Enqueued,
    EntryChanged,
    EntryDeleted,
    EntryHeld,
    EntryMarked,
    Event,
    SessionLost,
    StoreAdmitted,
)
from .._core.queue import Entry, EntryState, nearest_needed
from .._core.ramp import RampPlan
from .._core.shown import quoted, quoted_url, redact_url
from .._core.slots import Slot
from .._core.status import EntryStatus, Status, split_queue
from .._interrupts import call_with_sigint_held
from .._url import DEFAULT_REQUEST_TIMEOUT, ServiceURL
from .capabilities import Capabilities, Capability
from .driver import ADMITTED_VIEWS_KEPT, DriverContractError, QueueDriver, queues_of
from .fenced import FencedTransaction, Write, WriteKind
from .hub import SessionHub
from .revocation_watches import RevocationWatches
from .runner import Program, Runner
from .session import (
    RESTORED,
    SUSPENDED,
    SessionChange,
    SessionEvent,
    SessionState,
    session_lost,
    vouched_since,
)
from .store import MULTI, Backend, default_owner
from .waiter import Waiter

__all__ = [
    "ADMITTED_VIEWS_KEPT",
    "DEFAULT_REQUEST_TIMEOUT",
    "MULTI",
    "RESTORED",
    "SUSPENDED",
    "Backend",
    "Capabilities",
    "Capability",
    "CapacityChanged",
    "Deadline",
    "DriverContractError",
    "Enqueued",
    "Entry",
    "EntryChanged",
    "EntryData",
    "EntryDeleted",
    "EntryHeld",
    "EntryMarked",
    "EntryState",
    "EntryStatus",
    "Event",
    "FencedTransaction",
    "Program",
    "QueueDriver",
    "RampPlan",
    "RevocationWatches",
    "Runner",
    "ServiceURL",
    "SessionChange",
    "SessionEvent",
    "SessionHub",
    "SessionLost",
    "SessionState",
    "Slot",
    "Status",
    "StoreAdmitted",
    "StoredSemaphore",
    "Waiter",
    "Write",
    "WriteKind",
    "by_name",
    "call_with_sigint_held",
    "default_owner",
    "nearest_needed",
    "queues_of",
    "quoted",
    "quoted_url",
    "redact_url",
    "run_program",
    "run_program_async",
    "session_lost",
    "split_queue",
    "validate_capacity",
    "validate_name",
    "vouched_since",
]
