"""The asyncio face of the ZooKeeper backend, against a real server: cancellation at any
await, a create whose reply comes after the cancel, the successor of a cancelled waiter,
session expiry under an async waiter and holder, tasks sharing a semaphore with the sync
face in threads and processes, and no thread per waiting task.

Each test runs its own event loop (``asyncio.run``): the project takes no asyncio
plugin for pytest.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio
from semaphore_recipes.testing.checker import checked
from semaphore_recipes.testing.proxy import FaultProxy
from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness
from semaphore_recipes.zookeeper.backend import ZooKeeperBackend

from ..conftest import Workers, read_checker, wait_until

T = TypeVar("T")
MARGIN = 3.0  # a loaded machine may start things late


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def wrapped() -> T:
        return await main()

    return asyncio.run(wrapped())


def zk_backend(backend: aio.AsyncBackend) -> ZooKeeperBackend:
    assert isinstance(backend.backend, ZooKeeperBackend)
    return backend.backend


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def test_the_async_face_acquires_releases_reads_and_writes(zk: ZooKeeperHarness) -> None:
    async def main() -> None:
        async with aio.connect(zk.url) as backend:
            sem = backend.semaphore("basics", capacity=2)
            async with sem.acquire(permits=2, timeout=5.0) as permit:
                assert zk.entries() == [f"{zk_entry_root(zk)}/basics/{permit.key}"]
                with pytest.raises(sr.WouldBlock):
                    await sem.acquire(blocking=False)
                with pytest.raises(sr.AcquireTimeout):
                    await sem.acquire(timeout=0.2)
                status = await sem.status()
                assert [h.token for h in status.holders] == [permit.token]
                key = backend.data_key("basics")
                await permit.transaction().create(key, b"v1").commit()
                assert await backend.read(key) == b"v1"
            assert permit.state is sr.PermitState.RELEASED
            await permit.release()  # idempotent
            await sem.set_capacity(3)
            assert sem.capacity == 3
            assert (await backend.status("basics")).capacity == 3
            with pytest.raises(sr.PermitLost):
                await permit.transaction().set(key, b"v2").commit()
            await backend.delete_semaphore("basics")
            with pytest.raises(sr.SemaphoreNotFound):
                await backend.status("basics")
        assert zk_backend(backend).session_state is sr.SessionState.CLOSED

    run(main)
    assert zk.entries() == []


def zk_entry_root(zk: ZooKeeperHarness) -> str:
    """Where the harness's namespace keeps the semaphores (as ``zk.entries()`` names them)."""
    namespace = zk.url.split("://", 1)[1].split("?")[0]
    return namespace[namespace.index("/") :] + "/semaphore_recipes"


def test_cancellation_at_random_points_leaves_no_entry(zk: ZooKeeperHarness) -> None:
    """Acquires cancelled after a random number of loop iterations or a random delay, with
    the semaphore sometimes free (the cancel lands in the create, the listing, the held
    mark) and sometimes full (it lands in the watch reads or the wait). Nothing of ours
    is left, and then an acquire of the whole capacity is granted at once."""

    async def main() -> None:
        rng = random.Random(14)
        async with aio.connect(zk.url) as backend, aio.connect(zk.url) as other:
            sem = backend.semaphore("cancel", capacity=2)
            blocker = other.semaphore("cancel", capacity=2)
            cancelled = granted = 0
            for round_ in range(160):
                holder = None
                if round_ % 4 == 3:  # a leftover entry of ours would make this time out
                    holder = await blocker.acquire(permits=2, timeout=10)
                task = asyncio.ensure_future(sem.acquire(permits=rng.choice((1, 2)), timeout=10))
                if rng.random() < 0.5:
                    for _ in range(rng.randrange(0, 400)):
                        await asyncio.sleep(0)
                else:
                    await asyncio.sleep(rng.uniform(0, 0.02))
                task.cancel()
                try:
                    permit = await task
                except asyncio.CancelledError:
                    cancelled += 1
                else:
                    granted += 1
                    await permit.release()
                if holder is not None:
                    await holder.release()
            assert cancelled > 30 and granted > 10  # both ways out were taken, many times
            await until(lambda: zk.entries() == [])
            whole = await sem.acquire(permits=2, blocking=False)  # granted at once
            await whole.release()

    run(main)


@pytest.fixture
def proxy(zookeeper_server: Any) -> Iterator[FaultProxy]:
    """A fault proxy in front of the server (backends opened through it by URL)."""
    proxy = FaultProxy(zookeeper_server.host_port).start()
    yield proxy
    proxy.close()


async def healed(proxy: FaultProxy, zk: ZooKeeperHarness, sem: aio.AsyncSemaphore) -> None:
    """Heal ``proxy`` after it lost bytes (kazoo reconnects to the same session): then
    nothing of ours is left, and the semaphore is free."""
    proxy.cut()  # bytes were lost: these connections cannot go on
    proxy.restore()
    await until(lambda: zk.entries() == [])
    async with sem.acquire(blocking=False):
        pass


def test_a_create_whose_reply_comes_after_the_cancel_is_deleted(
    zk: ZooKeeperHarness, proxy: FaultProxy, sr_namespace: str
) -> None:
    """The create reaches the server but its reply is held back; the task is cancelled
    meanwhile. When the connection comes back (same session), the entry is found by its
    id and deleted: it must not block the queue."""

    async def main() -> None:
        url = f"zookeeper://{proxy.address}{sr_namespace}?session_timeout=8"
        async with aio.connect(url) as backend:
            sem = await backend.semaphore("late-reply", capacity=1).open()
            proxy.drop_replies()  # the requests get through, the replies are lost
            task = asyncio.ensure_future(sem.acquire(timeout=30))
            await until(lambda: len(zk.entries()) == 1)  # the create landed
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert len(zk.entries()) == 1  # the delete cannot have been answered yet
            await healed(proxy, zk, sem)

    run(main)


def test_a_cancelled_waiter_wakes_its_successor(zk: ZooKeeperHarness) -> None:
    """Capacity 2: one permit held, a waiter for 2 at the head, a waiter for 1 behind it
    (FIFO keeps it waiting). Cancelling the head grants the second at once, as a release
    of the head would."""

    async def main() -> None:
        async with aio.connect(zk.url) as backend:
            sem = backend.semaphore("successor", capacity=2)
            held = await sem.acquire()
            head = asyncio.ensure_future(sem.acquire(permits=2, timeout=60))
            await until(lambda: len(zk.entries()) == 2)
            second = asyncio.ensure_future(sem.acquire(timeout=60))
            await until(lambda: len(zk.entries()) == 3)
            await asyncio.sleep(0.3)
            assert not second.done()  # FIFO: it may not overtake the head
            head.cancel()
            permit = await asyncio.wait_for(second, 10)  # woken, no release needed
            # (the deletion wakes the successor before the head's own cleanup has its
            # confirmation: the head's task ends when it has)
            await asyncio.wait({head}, timeout=5)
            assert head.cancelled()
            await permit.release()
            await held.release()

    run(main)
    assert zk.entries() == []


def test_an_async_waiter_whose_session_expires_enters_the_queue_again(
    zk: ZooKeeperHarness,
) -> None:
    holder = zk.connect().semaphore("expiry", capacity=1).acquire()

    async def main() -> None:
        async with aio.connect(zk.url) as backend:
            sem = backend.semaphore("expiry", capacity=1)
            task = asyncio.ensure_future(sem.acquire(timeout=60))
            await until(lambda: len(zk.entries()) == 2)
            await asyncio.to_thread(zk.expire_session, zk_backend(backend))
            await until(lambda: len(zk.entries()) == 2)  # in the queue again, new session
            assert not task.done()
            holder.release()
            permit = await asyncio.wait_for(task, 20)
            assert permit.state is sr.PermitState.HELD
            assert zk.entries() == [f"{zk_entry_root(zk)}/expiry/{permit.key}"]
            await permit.release()

    run(main)
    assert zk.entries() == []


def test_an_async_holder_learns_of_its_loss(zk: ZooKeeperHarness) -> None:
    async def main() -> None:
        async with aio.connect(zk.url) as backend:
            sem = backend.semaphore("loss", capacity=1)
            permit = await sem.acquire(watch_entry=True)
            assert not permit.lost.is_set()
            await asyncio.to_thread(zk.expire_session, zk_backend(backend))
            await asyncio.wait_for(permit.lost.wait(), 20)
            assert permit.state is sr.PermitState.LOST
            with pytest.raises(sr.PermitLost):
                await permit.transaction().create(backend.data_key("loss"), b"x").commit()
            await permit.release()  # never raises
            async with sem.acquire(timeout=10):  # the session's end freed the semaphore
                pass

    run(main)


def test_a_deleted_entry_sets_lost_on_the_async_holder(zk: ZooKeeperHarness) -> None:
    async def main() -> None:
        async with aio.connect(zk.url) as backend:
            sem = backend.semaphore("deleted", capacity=1)
            permit = await sem.acquire(watch_entry=True)
            admin = zk.connect()
            await asyncio.to_thread(admin.delete_semaphore, "deleted")
            await asyncio.wait_for(permit.lost.wait(), 10)
            await permit.release()

    run(main)


def test_tasks_threads_and_processes_share_the_semaphore_within_capacity(
    zk: ZooKeeperHarness, workers: Workers, tmp_path: Path
) -> None:
    """One loop of 12 tasks over one backend, 2 threads over sync backends and 2 worker
    processes cycle weighted acquires on one semaphore of capacity 3: the held weight,
    recorded under a file lock by all of them, never exceeds 3."""
    checker = tmp_path / "checker.json"
    checker.write_text("")
    seconds = 6.0
    args = ["shared", "3", "cycle", "--weights", "1,2", "--seconds", str(seconds)]
    procs = [workers.start(zk.url, *args, "--checker", str(checker)) for _ in range(2)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def thread_cycles() -> None:
        try:
            sem = zk.connect().semaphore("shared", capacity=3)
            rng = random.Random()
            while not stop.is_set():
                weight = rng.choice((1, 2))
                with sem.acquire(permits=weight, timeout=30):
                    checked(str(checker), weight)
                    time.sleep(rng.uniform(0, 0.01))
                    checked(str(checker), -weight)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread_cycles, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()

    async def main() -> int:
        grants = 0
        async with aio.connect(zk.url) as backend:
            sem = backend.semaphore("shared", capacity=3)
            end = time.monotonic() + seconds

            async def task_cycles(seed: int) -> None:
                nonlocal grants
                rng = random.Random(seed)
                while time.monotonic() < end:
                    weight = rng.choice((1, 2))
                    async with sem.acquire(permits=weight, timeout=30):
                        checked(str(checker), weight)
                        grants += 1
                        await asyncio.sleep(rng.uniform(0, 0.01))
                        checked(str(checker), -weight)

            await asyncio.gather(*(task_cycles(seed) for seed in range(12)))
        return grants

    try:
        task_grants = run(main)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    for proc in procs:
        Workers.expect(proc, "CYCLES", timeout=60)
        assert proc.wait(20) == 0
    state = read_checker(checker)
    assert state["max"] <= 3
    assert task_grants > 12 and state["grants"] > task_grants  # everybody got permits
    wait_until(lambda: zk.entries() == [])


def test_waiting_tasks_add_no_threads(zk: ZooKeeperHarness) -> None:
    """200 tasks waiting in one loop use the threads one waiting task uses: kazoo's own."""

    async def main() -> None:
        async with aio.connect(zk.url) as backend:
            sem = backend.semaphore("threads", capacity=1)
            held = await sem.acquire()
            first = asyncio.ensure_future(sem.acquire(timeout=120))
            await until(lambda: len(zk.entries()) == 2)
            with_one = threading.active_count()
            rest = [asyncio.ensure_future(sem.acquire(timeout=120)) for _ in range(199)]
            await until(lambda: len(zk.entries()) == 201, timeout=60)
            assert threading.active_count() == with_one
            await held.release()
            for task in [first, *rest]:  # FIFO, one at a time
                permit = await asyncio.wait_for(task, 60)
                await permit.release()

    run(main)
    wait_until(lambda: zk.entries() == [])


class _Silent:
    """A TCP listener that accepts and never answers (not a ZooKeeper server)."""

    def __init__(self) -> None:
        import socket

        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def silent() -> Iterator[str]:
    server = _Silent()
    yield server.address
    server.close()


def test_connecting_does_not_block_the_loop(silent: str) -> None:
    """A server that never answers: ``connect`` fails with BackendUnavailable at the
    connect timeout, and the loop runs other tasks all the while."""

    async def main() -> int:
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.ensure_future(ticker())
        try:
            with pytest.raises(sr.BackendUnavailable):
                await aio.connect(f"zookeeper://{silent}/x?connect_timeout=1&session_timeout=10")
        finally:
            stop = True
            await ticking
        return ticks

    assert run(main) >= 10  # a blocked loop would have ticked once


def test_bad_url_parameters_fail_before_any_io() -> None:
    async def main() -> None:
        # nothing listens on port 9: a connection attempt would be BackendUnavailable
        for param in ("session_timeout=1e9", "connect_timeout=0", "request_timeout=x"):
            with pytest.raises(ValueError, match=param.split("=")[0]):
                await aio.connect(f"zookeeper://127.0.0.1:9/x?{param}")

    run(main)


def test_release_and_commit_are_bounded_while_zookeeper_is_unreachable(
    zk: ZooKeeperHarness, proxy: FaultProxy, sr_namespace: str
) -> None:
    """Black-holed: a commit raises BackendUnavailable and a release returns, each within
    the request timeout, and the loop runs meanwhile; the delete lands once the
    connection is back (same session)."""

    async def main() -> None:
        url = f"zookeeper://{proxy.address}{sr_namespace}?session_timeout=10&request_timeout=1"
        async with aio.connect(url) as backend:
            sem = backend.semaphore("bounded", capacity=1)
            permit = await sem.acquire()
            proxy.blackhole()
            start = time.monotonic()
            with pytest.raises(sr.BackendUnavailable):
                await permit.transaction().create(backend.data_key("bounded"), b"x").commit()
            ticker = asyncio.ensure_future(asyncio.sleep(0.3))
            await permit.release()
            took = time.monotonic() - start
            assert ticker.done()  # the loop ran while release waited
            assert took <= 2 + MARGIN, f"two calls bounded by request_timeout=1 took {took:.1f} s"
            assert len(zk.entries()) == 1
            await healed(proxy, zk, sem)

    run(main)


def test_a_cancelled_connect_stops_its_client(silent: str) -> None:
    async def main() -> None:
        before = threading.active_count()
        connecting = asyncio.ensure_future(
            aio.connect(f"zookeeper://{silent}/x?connect_timeout=30&session_timeout=10")
        )
        await asyncio.sleep(0.3)
        assert threading.active_count() > before  # kazoo's threads are running
        connecting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await connecting
        await until(lambda: threading.active_count() <= before, timeout=15)

    run(main)
