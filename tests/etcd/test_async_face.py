"""The asyncio face of the etcd backend (grpc.aio) against a real etcd: cancellation at
any point, a create whose reply comes after the cancel, session expiry while waiting, a
holder learning of its loss, the sync face in threads beside tasks, leader kill, and the
thread count not growing with the number of waiters."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio, registry
from semaphore_recipes.etcd.aio_client import AioEtcdClient
from semaphore_recipes.etcd.backend import EtcdBackend
from semaphore_recipes.testing.etcd_harness import EtcdHarness

from ..conftest import wait_until
from ..etcd_layer.helpers import busy_loop_for


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 120))


def etcd_of(backend: aio.AsyncBackend) -> EtcdBackend:
    assert isinstance(backend.backend, EtcdBackend)
    return backend.backend


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.02)


def test_the_async_face_is_native_grpc_aio(
    ed: EtcdHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """The registry's etcd class has the face; it runs on a grpc.aio client; the usage
    of the issue works end to end and leaves nothing behind: no entry, and no task
    left pending when the loop ends (closing ends the keepalive and watch tasks)."""
    assert registry.backend_class("etcd").capabilities.async_face

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            assert isinstance(etcd_of(backend).client, AioEtcdClient)
            sem = backend.semaphore("native", capacity=10)
            async with sem.acquire(permits=2, timeout=5.0) as permit:
                assert not permit.lost.is_set()
                key = backend.data_key("native")
                await permit.transaction().create(key, b"v").commit()
                assert await backend.read(key) == b"v"
                status = await sem.status()
                assert [h.token for h in status.holders] == [permit.token]
            with pytest.raises(sr.WouldBlock):
                async with sem.acquire(permits=10):
                    await sem.acquire(permits=1, blocking=False)

    with caplog.at_level("ERROR", logger="asyncio"):
        run(main)
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text
    assert ed.entries() == []


def test_cancelling_acquires_at_random_points_leaves_no_entry(ed: EtcdHarness) -> None:
    """Many rounds: a holder keeps the semaphore full, waiters are cancelled after a
    random delay (during the open, the create txn, the reads, the wait) or by
    ``asyncio.wait_for``; then the store holds no entry of theirs and an acquire of the
    whole capacity is granted at once."""
    capacity = 3
    rng = random.Random(14)

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("cancels", capacity=capacity)
            for round_ in range(40):
                holder = await sem.acquire(permits=rng.randint(1, capacity))
                tasks = [
                    asyncio.ensure_future(sem.acquire(permits=rng.randint(1, capacity)))
                    for _ in range(rng.randint(1, 4))
                ]
                await asyncio.sleep(rng.uniform(0, 0.01))
                if round_ % 3 == 0:
                    try:
                        extra = await asyncio.wait_for(
                            sem.acquire(permits=1), rng.uniform(0, 0.005)
                        )
                    except asyncio.TimeoutError:
                        pass  # cancelled by wait_for: its entry must go too (checked below)
                    else:
                        await extra.release()  # there was room: granted in time
                for task in tasks:
                    task.cancel()
                for outcome in await asyncio.gather(*tasks, return_exceptions=True):
                    if isinstance(outcome, aio.AsyncPermit):  # granted before the cancel
                        await outcome.release()
                    else:
                        assert isinstance(outcome, asyncio.CancelledError), outcome
                await holder.release()
                await eventually(lambda: ed.entries("cancels") == [])
                whole = await sem.acquire(permits=capacity, blocking=False)
                await whole.release()

    run(main)
    assert ed.entries() == []


def test_a_cancelled_waiter_wakes_its_successor_as_a_release_would(ed: EtcdHarness) -> None:
    """Capacity 1: a holder, then B, then C (which watches B). B is cancelled while it
    waits: its entry goes, C moves up behind the holder and is granted at the release."""

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("successor", capacity=1)
            holder = await sem.acquire()
            b = asyncio.ensure_future(sem.acquire(timeout=30))
            await eventually(lambda: len(ed.entries("successor")) == 2)
            c = asyncio.ensure_future(sem.acquire(timeout=30))
            await eventually(lambda: len(ed.entries("successor")) == 3)
            b.cancel()
            with pytest.raises(asyncio.CancelledError):
                await b
            await eventually(lambda: len(ed.entries("successor")) == 2)
            status = await sem.status()
            assert [h.token for h in status.holders] == [holder.token]
            assert len(status.waiters) == 1
            assert not c.done()
            await holder.release()
            permit = await asyncio.wait_for(c, 10)
            assert permit.token == status.waiters[0].token
            await permit.release()

    run(main)
    assert ed.entries() == []


def test_an_acquire_cancelled_right_after_its_create_was_sent_leaves_no_entry(
    ed: EtcdHarness,
) -> None:
    """The task is cancelled the moment the create txn is on the wire, before its
    reply: the undo must wait for the create's outcome (a cancelled grpc.aio call may
    still be applied), so no entry outlives its acquire, round after round."""
    rng = random.Random(1414)

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("sent", capacity=1)
            await sem.open()
            client = etcd_of(backend).client
            assert isinstance(client, AioEtcdClient)
            kv = client._stubs["KV"]
            acquiring: list[asyncio.Task[Any]] = []
            creates: list[Any] = []  # the raw grpc.aio calls of the creates

            class CancelOnceSent:
                """The KV stub, but the acquiring task is cancelled once its create
                txn is issued: while it is sent, on the wire, or at the server."""

                def __getattr__(self, name: str) -> Any:
                    return getattr(kv, name)

                def Txn(self, request: Any, **kwargs: Any) -> Any:
                    rpc = kv.Txn(request, **kwargs)
                    if acquiring and request.success and request.success[0].request_put.lease:
                        creates.append(rpc)
                        delay = rng.choice((0, 0, rng.uniform(0, 0.003)))
                        asyncio.get_running_loop().call_later(delay, acquiring.pop().cancel)
                    return rpc

            client._stubs["KV"] = CancelOnceSent()
            cancelled = 0
            for _ in range(150):
                task = asyncio.ensure_future(sem.acquire())
                acquiring.append(task)
                (outcome,) = await asyncio.gather(task, return_exceptions=True)
                if isinstance(outcome, aio.AsyncPermit):  # the reply beat the cancel
                    await outcome.release()
                else:
                    assert isinstance(outcome, asyncio.CancelledError), outcome
                    cancelled += 1
                # once the create has ended, its entry (if made) goes, for good
                await eventually(lambda: all(rpc.done() for rpc in creates))
                await eventually(lambda: ed.entries("sent") == [], timeout=5)
            client._stubs["KV"] = kv
            assert len(creates) == 150
            assert cancelled >= 75, cancelled  # most cancels landed while it was in flight
            permit = await sem.acquire(blocking=False)
            await permit.release()

    run(main)


def test_a_cancelled_release_still_deletes_the_entry(ed: EtcdHarness) -> None:
    """``await permit.release()`` cancelled at random points of its delete: the entry
    goes anyway (the delete is sent again in the background), round after round."""
    rng = random.Random(7)

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("release", capacity=1)
            for _ in range(40):
                permit = await sem.acquire(blocking=False)
                releasing = asyncio.ensure_future(permit.release())
                await asyncio.sleep(rng.choice((0, 0, 0.0001, 0.0003, 0.0006)))
                releasing.cancel()
                await asyncio.gather(releasing, return_exceptions=True)
                await eventually(lambda: ed.entries("release") == [], timeout=5)

    run(main)


def test_a_cancelled_release_deletes_the_slot_records_too(ed: EtcdHarness) -> None:
    """A holder's release whose delete txn is cancelled before it reached etcd: the
    delete sent again in the background takes the entry's job slot record with it (it
    used to take the records a second time, find none, and leave the record on the
    live lease until the backend closed)."""

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("cancelled-release", capacity=2)
            permit = await sem.acquire(slot=True)
            assert len(ed.entries("cancelled-release")) == 2  # the entry, its slot record
            store = sem._store
            assert store is not None
            client = etcd_of(backend).client
            assert isinstance(client, AioEtcdClient)
            kv = client._stubs["KV"]
            held: list[asyncio.Future[Any]] = []

            class FirstDeleteHeld:
                """The KV stub, but the first delete txn never leaves this process."""

                def __getattr__(self, name: str) -> Any:
                    return getattr(kv, name)

                def Txn(self, request: Any, **kwargs: Any) -> Any:
                    if not held and request.success[0].HasField("request_delete_range"):
                        held.append(asyncio.get_running_loop().create_future())
                        return held[0]
                    return kv.Txn(request, **kwargs)

            client._stubs["KV"] = FirstDeleteHeld()
            try:
                releasing = asyncio.ensure_future(
                    store.backend.run_async(store.release_entry(permit.key))
                )
                await eventually(lambda: bool(held))
                releasing.cancel()
                await asyncio.gather(releasing, return_exceptions=True)
                await eventually(lambda: ed.entries("cancelled-release") == [], timeout=5)
            finally:
                client._stubs["KV"] = kv

    run(main)


def test_an_async_waiter_re_enters_the_queue_when_its_session_expires(ed: EtcdHarness) -> None:
    """A holder in another backend (sync face); async waiters whose lease is revoked
    while they wait: the async holder's permit is lost (``lost`` set), the waiters
    enqueue again, all on one new lease (one task grants it, the others await that
    grant), and are granted in FIFO order once the holder releases."""
    other = ed.connect()
    sync_sem = other.semaphore("expiry", capacity=2)
    holder = sync_sem.acquire(timeout=5)

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("expiry", capacity=2)
            mine = await sem.acquire()  # ours, lost with the lease
            granted: list[int] = []

            async def wait_then_release() -> None:
                # 2 of 2: granted one at a time, each releasing at once
                async with sem.acquire(permits=2, timeout=30) as permit:
                    granted.append(permit.token)

            waiters = [asyncio.ensure_future(wait_then_release()) for _ in range(4)]
            await eventually(lambda: len(ed.entries("expiry")) == 6)
            leases_before = ed.sessions()
            old = ed.session_of(etcd_of(backend))
            await asyncio.to_thread(ed.expire_session, etcd_of(backend))
            await asyncio.wait_for(mine.lost.wait(), 10)
            assert mine.state is aio.PermitState.LOST
            await eventually(lambda: etcd_of(backend).lease_id not in (0, old))
            # the holder + the four waiters, re-entered on the one new lease
            await eventually(lambda: len(ed.entries("expiry")) == 5)
            assert ed.sessions() - leases_before == {etcd_of(backend).lease_id}
            assert granted == []
            await asyncio.to_thread(holder.release)
            await asyncio.gather(*waiters)
            assert granted == sorted(granted)  # FIFO, by their new entries' order
            assert ed.session_of(etcd_of(backend)) != old
            await mine.release()  # idempotent on a lost permit

    run(main)
    other.close()
    assert ed.entries() == []


def test_a_holder_keeps_its_permit_while_the_loop_is_starved(ed: EtcdHarness) -> None:
    """A session of 2 s, a permit held, then the loop kept busy for three TTLs by a
    storm of CPU-bound callbacks (as thousands of tasks in one loop make it): the
    session's keepalives are acknowledged meanwhile, so the permit is not lost, the
    session never suspended and its lease is the same one."""

    async def main() -> None:
        async with aio.connect(ed.url, session_timeout="2") as backend:
            etcd = etcd_of(backend)
            sem = backend.semaphore("starved", capacity=1)
            permit = await sem.acquire(timeout=5)
            lease = etcd.lease_id
            states: list[sr.SessionState] = []
            await busy_loop_for(6.0, on_each=lambda: states.append(backend.session_state))
            await asyncio.sleep(0.2)  # (reports made during the storm reach the loop)
            assert not permit.lost.is_set()
            assert set(states) == {sr.SessionState.CONNECTED}
            assert backend.session_state is sr.SessionState.CONNECTED
            assert etcd.lease_id == lease and lease in ed.sessions()
            await permit.release()

    run(main)
    assert ed.entries() == []


def test_tasks_and_sync_threads_share_a_semaphore_never_above_capacity(ed: EtcdHarness) -> None:
    """Tasks of one loop and threads of the sync face (another backend) cycle on the
    same semaphore: never more than N permits held at once; all end; nothing left."""
    capacity = 3
    held = [0]
    peak = [0]
    lock = threading.Lock()

    def enter(weight: int) -> None:
        with lock:
            held[0] += weight
            peak[0] = max(peak[0], held[0])
            assert held[0] <= capacity, held[0]

    def leave(weight: int) -> None:
        with lock:
            held[0] -= weight

    sync_backend = ed.connect()
    sync_sem = sync_backend.semaphore("shared", capacity=capacity)
    failures: list[BaseException] = []

    def cycle_sync(weight: int) -> None:
        try:
            for _ in range(15):
                with sync_sem.acquire(permits=weight, timeout=60):
                    enter(weight)
                    leave(weight)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=cycle_sync, args=(w,)) for w in (1, 2)]

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("shared", capacity=capacity)

            async def cycle(weight: int) -> None:
                for _ in range(15):
                    async with sem.acquire(permits=weight, timeout=60):
                        enter(weight)
                        await asyncio.sleep(0.001)
                        leave(weight)

            for t in threads:
                t.start()
            await asyncio.gather(*(cycle(w) for w in (1, 1, 2, 3)))
            for t in threads:
                await asyncio.to_thread(t.join, 60)

    run(main)
    sync_backend.close()
    assert not failures, failures
    assert peak[0] >= 2
    assert ed.entries() == []


def test_thread_count_does_not_grow_with_the_number_of_waiters(ed: EtcdHarness) -> None:
    """10 waiters, then 300 waiters, on one backend: the same threads (grpc's poller
    and the process's own); all granted, in the order they were enqueued."""

    async def wave(sem: aio.AsyncSemaphore, waiters: int) -> tuple[int, list[int]]:
        holder = await sem.acquire()
        granted: list[int] = []
        peak = [threading.active_count()]

        async def one() -> None:
            async with sem.acquire(timeout=120) as permit:
                granted.append(permit.token)
                peak[0] = max(peak[0], threading.active_count())

        tasks = [asyncio.ensure_future(one()) for _ in range(waiters)]
        await eventually(lambda: len(ed.entries("threads")) == waiters + 1, timeout=60)
        peak[0] = max(peak[0], threading.active_count())
        await holder.release()
        await asyncio.gather(*tasks)
        return peak[0], granted

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("threads", capacity=1)
            few, granted_few = await wave(sem, 10)
            many, granted_many = await wave(sem, 300)
            assert many <= few, (few, many)  # (a thread of an earlier test may end)
            # FIFO: granted in the order of the entries' creation (their tokens)
            assert granted_few == sorted(granted_few)
            assert granted_many == sorted(granted_many)

    run(main)
    assert ed.entries() == []


def test_an_async_holder_and_waiter_survive_a_leader_kill(etcd_cluster_harness: Any) -> None:
    """3 members: an async holder and waiter while the leader is killed. The holder's
    permit is not lost (a new leader keeps the lease), the waiter is granted after the
    release, and nothing is left behind."""
    cluster = etcd_cluster_harness

    async def main() -> None:
        async with aio.connect(cluster.url) as backend:
            sem = backend.semaphore("leader", capacity=1)
            holder = await sem.acquire(timeout=30)
            waiting = asyncio.ensure_future(sem.acquire(timeout=60))
            await eventually(lambda: len(cluster.entries("leader")) == 2, timeout=30)
            await asyncio.to_thread(cluster.kill_leader)
            await asyncio.sleep(1.0)
            key = backend.data_key("leader")
            for _ in range(50):  # the fenced write goes through under the new leader
                try:
                    await holder.transaction().create(key, b"after").commit()
                    break
                except sr.BackendUnavailable:
                    await asyncio.sleep(0.2)
            assert await backend.read(key) == b"after"
            assert not holder.lost.is_set()
            assert not waiting.done()
            await holder.release()
            permit = await waiting
            await permit.release()

    run(main)
    wait_until(lambda: cluster.entries() == [], timeout=15)


def test_cancelling_waiters_that_share_the_read_of_their_nearest_entries(
    ed: EtcdHarness,
) -> None:
    """Behind a queue longer than a view keeps, waiters enqueuing together share one
    read of their nearest entries (one reads, the others wait for its turn). Cancelling
    some of them at random points of that (the reader among them) leaves no entry, and
    the others are granted, one at a time, in the order of their entries."""
    rng = random.Random(1414)

    async def main() -> None:
        async with aio.connect(ed.url) as backend:
            sem = backend.semaphore("shared-read", capacity=1)
            for _ in range(3):
                holder = await sem.acquire()
                granted: list[int] = []

                async def one(granted: list[int]) -> None:
                    permit = await sem.acquire(timeout=60)
                    granted.append(permit.token)
                    await permit.release()

                ahead = [asyncio.ensure_future(one(granted)) for _ in range(70)]
                await eventually(lambda: len(ed.entries("shared-read")) == 71, 30)
                burst = [asyncio.ensure_future(one(granted)) for _ in range(40)]
                cancelled = rng.sample(burst, 20)
                for task in cancelled:
                    await asyncio.sleep(rng.uniform(0, 0.003))
                    task.cancel()
                await holder.release()
                outcomes = await asyncio.gather(*ahead, *burst, return_exceptions=True)
                for task, outcome in zip([*ahead, *burst], outcomes, strict=True):
                    if task in cancelled and task.cancelled():
                        continue
                    assert outcome is None, outcome
                assert granted == sorted(granted)
                await eventually(lambda: ed.entries("shared-read") == [])

    run(main)
    assert ed.entries() == []
