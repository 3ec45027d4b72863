"""How long this client can vouch for its SQL session, by its own clock.

The server sets a session's expiry from *its* clock when it runs a renewal, so the
session lives at least a session timeout after the renewal was sent; a protocol step
does not renew it. Past that (less ``backend.session.VOUCH_MARGIN``) the client cannot
tell: a server that stalled with its clock running on has expired the session, and an
admission told meanwhile may be of an entry it has deleted and given to others. An
admitted waiter then confirms its entry with a renewal first (``SQLQueue.confirm``).
"""

from __future__ import annotations

import time

from ..backend import vouched_since

__all__ = ["Lease"]


class Lease:
    """The session's lease as this client knows it: from the last renewal sent that
    the server confirmed (thread-safe: a float written whole)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._sent = time.monotonic()  # (made before the session is opened: sooner than its send)

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at ``sent_at`` was confirmed."""
        self._sent = max(self._sent, sent_at)

    def restart(self, sent_at: float) -> None:
        """A new session, opened by a statement sent at ``sent_at``."""
        self._sent = sent_at

    def since_renewal(self) -> float:
        """Seconds since the last confirmed renewal was sent."""
        return time.monotonic() - self._sent

    def vouched(self) -> bool:
        """Is the session surely alive now, with a margin to spare?"""
        return vouched_since(self._sent, self.timeout)

    def lapsed(self) -> bool:
        """Has a whole session timeout passed since the last confirmed renewal's send?
        (The server has expired the session, or will before we could say otherwise.)"""
        return self.since_renewal() > self.timeout
