"""A backend's session as permits and callers see it: what changed, and its state now.

A backend publishes :class:`SessionEvent` values to the permits (``Backend.publish``):
SUSPENDED when the connection is lost and the session may still be alive, RESTORED when
the same session is back, LOST with a reason when it has ended (expiry, a lease gone, a
client that can never reconnect, the store's history restarted).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass


class SessionChange(enum.Enum):
    """What happened to a backend's session, as told to its permits."""

    SUSPENDED = "suspended"  #: connection lost; the session may still be alive (unsafe)
    RESTORED = "restored"  #: the same session is connected again
    LOST = "lost"  #: the session ended (expired, lease gone, client dead): permits are gone


@dataclass(frozen=True)
class SessionEvent:
    """A session change and, for LOST, why (it ends up in the permit's log line)."""

    change: SessionChange
    reason: str = ""

    def __post_init__(self) -> None:
        if self.change is SessionChange.LOST and not self.reason:
            raise ValueError("a LOST session event says why")


SUSPENDED = SessionEvent(SessionChange.SUSPENDED)
RESTORED = SessionEvent(SessionChange.RESTORED)


def session_lost(reason: str) -> SessionEvent:
    """The LOST event, with why."""
    return SessionEvent(SessionChange.LOST, reason)


class SessionState(enum.Enum):
    """A backend's session right now (``backend.session_state``)."""

    CONNECTED = "connected"  #: the store answers; held permits are safe
    SUSPENDED = "suspended"  #: connection lost, the session may still be alive
    EXPIRED = "expired"  #: the session ended; a new one is made on the next request
    FAILED = "failed"  #: the client can never reach the store again
    CLOSED = "closed"  #: ``close()`` was called


#: the part of a session timeout, at its end, in which a client no longer vouches for
#: its session (the two clocks' rates, and the way back to the caller)
VOUCH_MARGIN = 0.1


def vouched_since(sent: float, timeout: float) -> bool:
    """Does a session that a request sent at ``sent`` (``time.monotonic``) kept alive
    surely live now, the store expiring it ``timeout`` seconds after its last renewal?"""
    return time.monotonic() - sent < timeout * (1 - VOUCH_MARGIN)
