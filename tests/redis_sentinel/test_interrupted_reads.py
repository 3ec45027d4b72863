"""A call cut by Ctrl-C leaves no reply behind for the next call on its connection.

redis-py's blocking Sentinel connection (8.1) kept a connection whose read an interrupt
cut, and the runners' bounded EVALSHA released one whose reply was not read: the next
command read that reply (a script's list answered with another's number). Both faces of
one store share nothing here: the sync runner alone reads with a bound of its own.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.redis.calls import no_retries
from semaphore_recipes.redis.clients import close_sync, sync_client
from semaphore_recipes.redis.params import RedisParams
from semaphore_recipes.registry import parse_url
from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.store_selection import harness_fixture

STORES = ["redis", "redis+sentinel"]


def _sigint_in(delay: float) -> threading.Timer:
    """A timer (to start where its SIGINT is caught) that interrupts this thread."""
    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main
    return threading.Timer(delay, lambda: signal.pthread_kill(main, signal.SIGINT))


def _settle(timer: threading.Timer) -> None:
    """Wait for ``timer``'s SIGINT, if it is still to come, to land here."""
    while True:
        try:
            if timer.is_alive() or timer.ident is not None:
                timer.join()
            time.sleep(0.02)
            return
        except KeyboardInterrupt:
            continue


@pytest.mark.parametrize("store", STORES)
def test_a_read_cut_by_an_interrupt_closes_its_connection(
    store: str, request: pytest.FixtureRequest
) -> None:
    harness: Harness = request.getfixturevalue(harness_fixture(store))
    client: Any = sync_client(RedisParams.from_url(parse_url(harness.url)), no_retries())
    try:
        timer = _sigint_in(0.1)
        with pytest.raises(KeyboardInterrupt):
            timer.start()
            client.blpop(["sr-tests:never-pushed"], timeout=1)  # (its reply: nil, at 1 s)
        _settle(timer)
        assert client.echo("fresh") == b"fresh"
    finally:
        close_sync(client)


@pytest.mark.parametrize("store", STORES)
def test_interrupted_acquires_leave_no_reply_for_the_next(
    store: str, request: pytest.FixtureRequest
) -> None:
    harness: Harness = request.getfixturevalue(harness_fixture(store))
    backend = harness.connect()
    backend.semaphore("cx-a", capacity=2)
    b = backend.semaphore("cx-b", capacity=1)
    rng = random.Random(16)
    failures: list[BaseException] = []
    for _ in range(150):
        timer = _sigint_in(rng.uniform(0, 0.004))
        permit = None
        try:
            wanted: dict[str | sr.Semaphore, int] = {"cx-a": rng.randint(1, 2), b: 1}
            timer.start()  # (its SIGINT may land before start returns)
            permit = backend.acquire_all(wanted, timeout=5)
        except KeyboardInterrupt:
            pass
        except sr.SemaphoreError:
            raise
        except Exception as exc:  # (a reply read by the wrong call: not a library error)
            failures.append(exc)
        _settle(timer)
        if permit is not None:
            permit.release()
    assert failures == []
