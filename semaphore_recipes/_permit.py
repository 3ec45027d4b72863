"""What both faces' permits share: the state, and how session and entry events move it.

A backend reports from its own threads (kazoo's, the etcd watch and keepalive threads,
the memory store's caller); the state changes at once, under a lock. How ``lost`` is
signalled is the face's: a :class:`threading.Event` set in place, or an
:class:`asyncio.Event` set through the event loop; so is ``revoke_requested``, set when
someone asks the holder to give its permits back (``Semaphore.revoke``): the permit
stays HELD until it is released, or LOST if the revoker removes its entry.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from ._core.queue import Entry
from ._core.slots import Slot
from .backend import SessionChange, SessionEvent, SessionHub, session_lost
from .errors import BackendUnavailable, PermitLost
from .instrumentation import Instrumentation, LostReason, report

log = logging.getLogger("semaphore_recipes")

__all__ = ["LostEvent", "PermitBase", "PermitState"]


class PermitState(enum.Enum):
    HELD = "held"
    SUSPENDED = "suspended"  # connection lost; the session may still be alive: unsafe
    LOST = "lost"  # session/lease gone or entry deleted: the permit is gone
    RELEASED = "released"


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class PermitBase:
    """Permits held in one semaphore: the state machine both faces share."""

    def __init__(self, semaphore: _Named, entry: Entry, token: int, owner: str) -> None:
        self.key = entry.key
        self.permits = entry.weight
        self.token = token  #: fencing token: grows monotonically across the whole store
        #: the job slots held (``acquire(slot=True)``): ``permits`` distinct indices in
        #: ``0..capacity-1``, lowest first, each with its own token; () without
        self.slots: tuple[Slot, ...] = ()
        self.owner = owner
        self._name = semaphore.name
        self._state = PermitState.HELD
        self._lock = threading.Lock()
        self._unlisten: Callable[[], None] | None = None
        self._removed = False  # release() has asked the store to delete the entry
        self._instrumentation: Instrumentation | None = None  # told while it counts it held
        self._lost_reason: LostReason | None = None
        self._revoke_asked = False  # a revoke request was seen on the entry

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._name!r} permits={self.permits} token={self.token} "
            f"state={self._state.value}>"
        )

    @property
    def state(self) -> PermitState:
        """HELD, SUSPENDED (connection lost, session maybe alive), LOST or RELEASED."""
        return self._state

    def check(self) -> None:
        """Raise PermitLost unless the permit is safely HELD right now."""
        state = self._state
        if state is not PermitState.HELD:
            raise PermitLost(f"permit {self.key!r} of {self._name!r} is {state.value}")

    def _begin_release(self) -> bool:
        """Release's bookkeeping: False when it was released (or abandoned) already."""
        with self._lock:
            self._stop_listening()
            if self._removed:
                return False
            self._removed = True
            if self._state is not PermitState.LOST:
                self._state = PermitState.RELEASED
                self._dropped(None)
        # A LOST permit's entry is deleted too: the verdict may be the client's own (a
        # whole session timeout disconnected) on a session the server kept alive, and
        # its entry would then hold the permits until the session ends.
        return True

    def _signal_lost(self) -> None:
        """Set the face's ``lost`` event (called once, under the lock)."""
        raise NotImplementedError

    # session and entry events, from the backend's threads
    def _session_changed(self, event: SessionEvent) -> None:
        with self._lock:
            if self._state in (PermitState.RELEASED, PermitState.LOST):
                return
            if event.change is SessionChange.SUSPENDED:
                self._state = PermitState.SUSPENDED
                log.warning("permit %r of %r suspended: connection lost", self.key, self._name)
            elif event.change is SessionChange.RESTORED:
                self._state = PermitState.HELD
                log.info(
                    "permit %r of %r held again: same session reconnected", self.key, self._name
                )
            else:
                self._mark_lost(event.reason, LostReason.SESSION)

    def _follow_session(self, hub: SessionHub, session_ended: Callable[[], bool]) -> None:
        """Listen to ``hub``'s session changes from now on, then ask ``session_ended``
        (the acquire's inbox, drained) whether the session ended since the admission:
        backends tell permits first, then waiters, so an end that came before the
        listener is in the inbox. BackendUnavailable (closed or failed as the permit was
        granted) passes, the listener removed."""
        self._unlisten = hub.add_permit_listener(self._session_changed)
        try:
            ended = session_ended()
        except BackendUnavailable:
            self._stop_listening()
            raise
        if ended:
            self._session_changed(session_lost("the session ended as the permit was granted"))

    def _entry_lost(self, why: str) -> None:
        with self._lock:
            if self._state in (PermitState.RELEASED, PermitState.LOST):
                return
            self._mark_lost(why, LostReason.ENTRY)

    def _mark_lost(self, why: str, reason: LostReason) -> None:
        self._state = PermitState.LOST
        self._lost_reason = reason
        self._stop_listening()
        log.warning("permit %r of %r lost: %s", self.key, self._name, why)
        self._dropped(reason)
        self._signal_lost()

    def _signal_revoke(self) -> None:
        """Set the face's ``revoke_requested`` event (called once, under the lock)."""
        raise NotImplementedError

    def _revoke_requested(self) -> None:
        """A revoke request is on the entry (the store's watch of it, backend thread)."""
        with self._lock:
            if self._revoke_asked or self._state in (PermitState.RELEASED, PermitState.LOST):
                return
            self._revoke_asked = True
            log.warning("permit %r of %r: revocation requested", self.key, self._name)
            self._signal_revoke()
            instrumentation = self._instrumentation
        if instrumentation is not None:
            report(instrumentation.permit_revoked, self._name, self.permits)

    def _observe(self, instrumentation: Instrumentation) -> None:
        """The acquire returns this permit: tell ``instrumentation`` it is held, and of
        its end when it comes (or at once if it was lost before the acquire returned)."""
        with self._lock:
            report(instrumentation.permit_held, self._name, self.permits)
            if self._state is PermitState.LOST:
                report(instrumentation.permit_dropped, self._name, self.permits, self._lost_reason)
            elif self._state is not PermitState.RELEASED:
                self._instrumentation = instrumentation
                if self._revoke_asked:  # asked before the acquire returned
                    report(instrumentation.permit_revoked, self._name, self.permits)

    def _dropped(self, lost: LostReason | None) -> None:
        """No longer held (under the lock): tell the instrumentation, once."""
        instrumentation, self._instrumentation = self._instrumentation, None
        if instrumentation is not None:
            report(instrumentation.permit_dropped, self._name, self.permits, lost)

    def _abandoned(self) -> None:
        """The acquire that made this permit was interrupted before it returned it: the
        acquire's cleanup deletes the entry."""
        self._state = PermitState.RELEASED
        self._removed = True
        self._stop_listening()

    def _stop_listening(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None


class LostEvent(PermitBase):
    """What both blocking permits share: ``lost``, a :class:`threading.Event` made when
    first asked for (most permits are released with nobody looking at it, and making
    one costs a lock and a condition on every acquire)."""

    _lost_event: threading.Event | None = None
    _revoke_event: threading.Event | None = None

    @property
    def lost(self) -> threading.Event:
        """Set when the permit is gone (never cleared)."""
        with self._lock:
            if self._lost_event is None:
                self._lost_event = threading.Event()
                if self._state is PermitState.LOST:
                    self._lost_event.set()
            return self._lost_event

    def _signal_lost(self) -> None:
        if self._lost_event is not None:  # (else made set when asked for: under the lock)
            self._lost_event.set()

    @property
    def revoke_requested(self) -> threading.Event:
        """Set when someone asked this holder to give its permits back
        (``Semaphore.revoke``; seen with ``acquire(watch_entry=True)``): release soon.
        Never cleared; the permit stays HELD until released or its entry is removed."""
        with self._lock:
            if self._revoke_event is None:
                self._revoke_event = threading.Event()
                if self._revoke_asked:
                    self._revoke_event.set()
            return self._revoke_event

    def _signal_revoke(self) -> None:
        if self._revoke_event is not None:  # (else made set when asked for)
            self._revoke_event.set()
