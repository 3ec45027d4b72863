"""What an admitted waiter learns from its inbox as its permit is made."""

from __future__ import annotations

import pytest

import semaphore_recipes as sr
from semaphore_recipes.backend import Waiter


def test_a_backend_closed_as_the_permit_is_granted_ends_the_acquire() -> None:
    """``close()`` posts BackendFailed to the waiters after telling the permits: a
    waiter admitted meanwhile (its predecessor's entry went with the closed session)
    must end with BackendUnavailable, not hand out a permit that nobody will ever tell
    of the close (it was made after the permits were told)."""
    waiter = Waiter(1, "me")
    waiter.new_generation()
    waiter.post_backend_failed("the etcd backend was closed")
    with pytest.raises(sr.BackendUnavailable, match="closed"):
        waiter.session_ended()


def test_a_session_lost_as_the_permit_is_granted_is_told_and_old_posts_are_not() -> None:
    waiter = Waiter(1, "me")
    waiter.new_generation()
    waiter.post_session_lost()
    assert waiter.session_ended()
    old = waiter.new_generation()
    waiter.post(old - 1, sr.backend.SessionLost())
    assert not waiter.session_ended()
