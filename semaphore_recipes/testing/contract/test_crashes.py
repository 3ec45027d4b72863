"""Holders that crash or pause past their session, on every backend.

The session is the ZooKeeper session or the etcd lease; ``session_timeout`` sets both.
"""

from __future__ import annotations

import signal
import time

from semaphore_recipes.testing.harness import Harness
from semaphore_recipes.testing.polling import wait_until
from semaphore_recipes.testing.waiters import waiter_thread
from semaphore_recipes.testing.workers import Workers

SESSION = 2  # session timeout / lease TTL (s) of the processes that crash or pause


def test_kill_9_of_a_holder_returns_its_permit_within_the_session_timeout(
    service: Harness, workers: Workers
) -> None:
    sem = service.connect().semaphore("crash", capacity=1)
    holder = workers.start(service.url_with(session_timeout=SESSION), "crash", "1", "hold")
    Workers.expect(holder, "HELD")
    t, out = waiter_thread(sem)
    wait_until(lambda: len(sem.status().waiters) == 1)
    killed = time.monotonic()
    holder.send_signal(signal.SIGKILL)
    t.join(SESSION + 5)
    assert out, "the waiter was never granted"
    elapsed = out[0][0] - killed
    print(
        f"\ncrash-release ({service.kind}): granted {elapsed:.2f} s after kill -9 "
        f"(session timeout {SESSION} s)"
    )
    assert elapsed <= SESSION + 1.0
    out[0][1].release()


def test_a_holder_paused_past_its_session_is_fenced_off(service: Harness, workers: Workers) -> None:
    sem = service.connect().semaphore("pause", capacity=1)
    holder = workers.start(service.url_with(session_timeout=SESSION), "pause", "1", "hold")
    token = int(Workers.expect(holder, "HELD").split()[1])
    holder.send_signal(signal.SIGSTOP)
    try:
        permit = sem.acquire(timeout=SESSION + 5)  # the paused holder's session runs out
        assert permit.token > token
    finally:
        holder.send_signal(signal.SIGCONT)
    Workers.expect(holder, "LOST", timeout=15)  # on resume it learns its session is gone
    assert Workers.expect(holder, "FENCE-") == "FENCE-REJECTED"
    assert holder.wait(10) == 0
    permit.release()


def test_a_waiter_admitted_while_paused_past_its_session_queues_again(
    service: Harness, workers: Workers
) -> None:
    """A waiter admitted as it paused, and paused past its session: its permit went to
    the next waiter meanwhile, so on resume it enters the queue again; it must not act
    on the admission it was told of before its session ran out."""
    sem = service.connect().semaphore("paused-waiter", capacity=1)
    first = sem.acquire()
    paused = workers.start(service.url_with(session_timeout=SESSION), "paused-waiter", "1", "hold")
    wait_until(lambda: len(sem.status().waiters) == 1)
    paused.send_signal(signal.SIGSTOP)
    try:
        t, out = waiter_thread(sem)
        wait_until(lambda: len(sem.status().waiters) == 2)
        first.release()  # admits the paused waiter, on stores whose server decides
        t.join(SESSION + 5)  # its session runs out: the next waiter is admitted
        assert out, "the waiter behind the paused one was never granted"
        following = out[0][1]
    finally:
        paused.send_signal(signal.SIGCONT)
    status = sem.status()
    assert [h.token for h in status.holders] == [following.token], status
    # on resume it learns its session is gone and waits again, behind the holder
    wait_until(lambda: len(sem.status().waiters) == 1, timeout=15)
    following.release()
    assert int(Workers.expect(paused, "HELD").split()[1]) > following.token
