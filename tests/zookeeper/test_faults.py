"""ZooKeeper-specific faults: crashes, pauses, lost replies, expiry, leader loss."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.plugin import leftover_entries
from semaphore_recipes.testing.proxy import FaultProxy
from semaphore_recipes.testing.zookeeper_server import ZooKeeperEnsemble, expire_session

from ..conftest import (
    Service,
    Workers,
    cycle_through_a_leader_kill,
    wait_until,
    waiter_thread,
)


def _proxied(zk: Service, zookeeper_server: Any, sr_namespace: str) -> tuple[FaultProxy, Any]:
    proxy = FaultProxy(zookeeper_server.host_port)
    proxy.start()
    backend = zk.connect(url=f"zookeeper://{proxy.address}{sr_namespace}?session_timeout=6")
    return proxy, backend


@pytest.mark.parametrize("reached_server", [True, False])
def test_connection_loss_during_the_create_leaves_one_entry(
    zk: Service,
    zookeeper_server: Any,
    zookeeper_admin: Any,
    sr_namespace: str,
    reached_server: bool,
) -> None:
    proxy, backend = _proxied(zk, zookeeper_server, sr_namespace)
    try:
        sem = backend.semaphore("lost-reply", capacity=2)
        if reached_server:
            proxy.drop_replies()  # the create reaches ZooKeeper, its reply does not come back
        else:
            proxy.blackhole()  # the create never reaches ZooKeeper
        t, out = waiter_thread(sem, timeout=20)
        if reached_server:
            wait_until(lambda: len(leftover_entries(zookeeper_admin, sr_namespace)) == 1)
        else:
            time.sleep(0.5)
            assert leftover_entries(zookeeper_admin, sr_namespace) == []
        proxy.cut()
        time.sleep(0.3)
        proxy.restore()
        t.join(20)
        assert out, "acquire did not complete after the connection came back"
        permit = out[0][1]
        entries = leftover_entries(zookeeper_admin, sr_namespace)
        assert [e.rsplit("/", 1)[1] for e in entries] == [permit.key]  # no orphan, no second
        permit.release()
    finally:
        backend.close()
        proxy.close()


def test_a_waiter_whose_session_expires_enters_the_queue_again(
    zk: Service, caplog: pytest.LogCaptureFixture
) -> None:
    holder_sem = zk.connect().semaphore("expire-w", capacity=1)
    waiter_backend = zk.connect()
    sem = waiter_backend.semaphore("expire-w", capacity=1)
    held = holder_sem.acquire()
    t, out = waiter_thread(sem)
    wait_until(lambda: len(holder_sem.status().waiters) == 1)
    before = holder_sem.status().waiters[0].token
    with caplog.at_level(logging.WARNING, logger="semaphore_recipes"):
        expire_session(waiter_backend.client)
        wait_until(lambda: [w.token for w in holder_sem.status().waiters] not in ([], [before]))
    assert "entering the queue again" in caplog.text
    held.release()
    t.join(10)
    assert out and out[0][1].state is sr.PermitState.HELD
    out[0][1].release()


def test_a_holder_whose_session_expires_loses_its_permit(zk: Service) -> None:
    backend = zk.connect()
    sem = backend.semaphore("expire-h", capacity=1)
    permit = sem.acquire()  # alone in the queue: the driver remembers that of its entry
    expire_session(backend.client)
    assert permit.lost.wait(5)
    assert permit.state is sr.PermitState.LOST
    with pytest.raises(sr.PermitLost):
        permit.check()
    tx = permit.transaction()
    tx.create("/fenced-after-expiry", b"x")
    with pytest.raises(sr.PermitLost):
        tx.commit()
    permit.release()  # a no-op now, and no error
    other = zk.connect().semaphore("expire-h", capacity=1)
    other.acquire(timeout=5).release()
    # a lost permit is never released: the new session dropped what the driver kept
    wait_until(lambda: sem._store._alone == {})


def test_a_holder_cut_off_is_suspended_then_held_again(
    zk: Service, zookeeper_server: Any, sr_namespace: str
) -> None:
    proxy, backend = _proxied(zk, zookeeper_server, sr_namespace)
    try:
        permit = backend.semaphore("cut", capacity=1).acquire()
        proxy.cut()
        wait_until(lambda: permit.state is sr.PermitState.SUSPENDED)
        with pytest.raises(sr.PermitLost):
            permit.check()  # unsafe while suspended
        proxy.restore()
        wait_until(lambda: permit.state is sr.PermitState.HELD, timeout=10)
        assert not permit.lost.is_set()
        permit.release()
    finally:
        backend.close()
        proxy.close()


def test_a_holder_cut_off_for_a_whole_session_timeout_is_lost(
    zk: Service, zookeeper_server: Any, sr_namespace: str
) -> None:
    proxy, backend = _proxied(zk, zookeeper_server, sr_namespace)
    other = zk.connect().semaphore("partition", capacity=1)
    try:
        permit = backend.semaphore("partition", capacity=1).acquire()
        cut_at = time.monotonic()
        proxy.blackhole()
        assert permit.lost.wait(15), "no LOST while partitioned"
        # kazoo notices after its read timeout (2/3 of the session), then a session timeout
        assert time.monotonic() - cut_at <= 6 * (1 + 2 / 3) + 1
        other.acquire(timeout=10).release()  # the server expired the session meanwhile
    finally:
        backend.close()
        proxy.close()


def test_killing_the_leader_of_an_ensemble_while_processes_cycle(
    zookeeper_ensemble: ZooKeeperEnsemble, sr_namespace: str, workers: Workers, tmp_path: Path
) -> None:
    url = f"zookeeper://{zookeeper_ensemble.connect_string}{sr_namespace}?session_timeout=8"
    cycle_through_a_leader_kill(url, workers, tmp_path, lambda: zookeeper_ensemble.leader().kill())
    from kazoo.client import KazooClient

    admin = KazooClient(hosts=zookeeper_ensemble.connect_string)
    admin.start(timeout=15)
    try:
        wait_until(lambda: leftover_entries(admin, sr_namespace) == [], timeout=15)
    finally:
        admin.stop()
        admin.close()


def test_the_permit_survives_a_restart_of_a_follower(
    zookeeper_ensemble: ZooKeeperEnsemble, sr_namespace: str
) -> None:
    url = f"zookeeper://{zookeeper_ensemble.connect_string}{sr_namespace}?session_timeout=8"
    with sr.connect(url) as backend:
        sem = backend.semaphore("follower", capacity=1)
        permit = sem.acquire(timeout=10)
        for member in zookeeper_ensemble.followers():
            member.kill()
            member.start()
        assert not permit.lost.is_set()
        permit.release()
        sem.acquire(timeout=10).release()


def test_corrupt_stored_capacity_is_corrupt_state(
    zk: Service, zookeeper_admin: Any, sr_namespace: str
) -> None:
    backend = zk.connect()
    path = f"{sr_namespace}/semaphore_recipes/junk"
    zookeeper_admin.create(path, b"not json", makepath=True)
    with pytest.raises(sr.CorruptState):
        backend.semaphore("junk", capacity=1)
    zookeeper_admin.set(path, b'{"capacity": -3}')
    with pytest.raises(sr.CorruptState):
        backend.semaphore("junk", capacity=1)
    assert zookeeper_admin.get_children(path) == []  # nothing was written


def test_a_malformed_entry_is_corrupt_state_not_a_guess(
    zk: Service, zookeeper_admin: Any, sr_namespace: str
) -> None:
    sem = zk.connect().semaphore("badentry", capacity=1)
    path = f"{sr_namespace}/semaphore_recipes/badentry"
    zookeeper_admin.create(f"{path}/e-garbage", b"")
    with pytest.raises(sr.CorruptState):
        sem.acquire(timeout=2)
    zookeeper_admin.delete(f"{path}/e-garbage")
    wait_until(lambda: zk.entries() == [])


def test_a_permit_lost_by_the_clients_own_verdict_is_deleted_when_the_session_lived(
    zk: Service, zookeeper_server: Any, zookeeper_admin: Any, sr_namespace: str
) -> None:
    """After a whole session timeout disconnected, the backend takes its permits for
    LOST: the server may have expired the session unseen. When the session in fact
    lived (here a second connection kept it alive, as a new leader that re-arms the
    sessions does), releasing the LOST permit must still delete its entry, which would
    otherwise hold its permits until the session ends (found by the chaos campaign)."""
    from kazoo.client import KazooClient

    proxy, backend = _proxied(zk, zookeeper_server, sr_namespace)
    keeper_proxy = FaultProxy(zookeeper_server.host_port)
    keeper_proxy.start()
    keeper = None
    try:
        sem = backend.semaphore("lost-verdict", capacity=1)
        permit = sem.acquire()
        session = backend.client.client_id
        proxy.blackhole()
        keeper = KazooClient(hosts=keeper_proxy.address, client_id=session, timeout=6)
        keeper.start(timeout=10)  # the same session, kept alive on the server meanwhile
        assert permit.lost.wait(15), "the backend's own verdict never came"
        keeper_proxy.cut()  # the keeper goes quiet without closing the session
        proxy.cut()
        time.sleep(0.2)
        proxy.restore()  # the backend reconnects to the session that lived
        wait_until(lambda: backend.client.connected and backend.client.client_id == session)
        assert [e.rsplit("/", 1)[1] for e in zk.entries()] == [permit.key]
        permit.release()
        assert permit.state is sr.PermitState.LOST
        wait_until(lambda: zk.entries() == [], timeout=5.0)
        with sem.acquire(timeout=5):  # the semaphore is free again
            pass
    finally:
        if keeper is not None:
            keeper.stop()
            keeper.close()
        backend.close()
        proxy.close()
        keeper_proxy.close()


def test_a_kazoo_wait_that_gives_up_before_the_deadline_is_waited_again() -> None:
    """kazoo raises its own timeout when its one wait returns without a value, which can
    be a moment before the acquire's deadline: that must never leave the library (the
    campaign saw acquire raise KazooTimeoutError); only AcquireTimeout may, at the end."""
    from types import SimpleNamespace
    from typing import cast

    from kazoo.handlers.threading import KazooTimeoutError

    from semaphore_recipes._core.deadline import Deadline
    from semaphore_recipes.zookeeper.queue import ZooKeeperQueue

    class GivesUpOnce:
        calls = 0

        def get(self, block: bool, timeout: float | None) -> str:
            self.calls += 1
            if self.calls == 1:
                raise KazooTimeoutError("the wait returned without a value")
            return "the reply"

    queue = cast(Any, SimpleNamespace(name="early"))
    reply = GivesUpOnce()
    assert ZooKeeperQueue._result(queue, reply, Deadline(5.0, time.monotonic)) == "the reply"
    assert reply.calls == 2
    with pytest.raises(sr.AcquireTimeout):
        ZooKeeperQueue._result(queue, GivesUpOnce(), Deadline(0.0, time.monotonic))


def test_a_connection_lost_as_the_enqueue_rereads_a_changed_capacity_is_waited_out(
    zk: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storm campaign saw acquire raise kazoo's ConnectionLoss: the listing showed a
    changed capacity, and the read that follows it lost its connection. The loss is put
    into the capacity reads only (the real server answers every other request): the
    watch's re-read first, so the cached capacity stays stale, then the enqueue's."""
    from kazoo.exceptions import ConnectionLoss

    backend = zk.connect()
    sem = backend.semaphore("reread", capacity=2)
    capacity_path = sem._store.path
    real_get = backend.client.get_async
    losses = [2]

    def get_async(path: str, watch: Any = None) -> Any:
        if path == capacity_path and losses[0] > 0:
            losses[0] -= 1
            lost = backend.client.handler.async_result()
            lost.set_exception(ConnectionLoss("injected: the connection dropped"))
            return lost
        return real_get(path, watch=watch)

    monkeypatch.setattr(backend.client, "get_async", get_async)
    zk.connect().semaphore("reread", capacity=2).set_capacity(3)
    wait_until(lambda: losses[0] == 1)  # the watch's re-read was lost: the cache is stale
    assert sem.capacity == 2
    with sem.acquire(timeout=10):  # its listing shows the change: the capacity is read again
        assert losses[0] == 0 and sem.capacity == 3
