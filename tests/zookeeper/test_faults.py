"""ZooKeeper-specific faults: a whole session timeout partitioned, a follower restarted,
corrupt nodes, the client's own LOST verdict, kazoo's errors, the lone-client path after
expiry (the faults every backend has: semaphore_recipes/testing/contract)."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.harness import Cut
from semaphore_recipes.testing.proxy import FaultProxy
from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness
from semaphore_recipes.testing.zookeeper_server import ZooKeeperEnsemble
from semaphore_recipes.zookeeper._waits import Answering, Within
from semaphore_recipes.zookeeper.queue import ZooKeeperQueue

from ..conftest import wait_until


def test_a_new_session_drops_what_the_lone_client_path_kept_of_the_old_one(
    zk: ZooKeeperHarness,
) -> None:
    """The driver remembers the entries it knows alone in the queue; they died with the
    expired session, and the new session must drop them itself, whether or not the lost
    permit is ever released (the contract suite's
    ``test_a_holder_whose_session_ends_loses_its_permit`` checks the permit)."""
    backend = zk.connect()
    sem = backend.semaphore("expire-h", capacity=1)
    store = cast(ZooKeeperQueue, sem._store)
    permit = sem.acquire()  # alone in the queue: the driver remembers that of its entry
    assert store._alone != {}
    zk.expire_session(backend)
    assert permit.lost.wait(5)
    wait_until(lambda: store._alone == {})  # before any release: the new session did it
    permit.release()  # a no-op now
    other = zk.connect().semaphore("expire-h", capacity=1)
    other.acquire(timeout=5).release()


def test_a_holder_cut_off_for_a_whole_session_timeout_is_lost(zk: ZooKeeperHarness) -> None:
    backend = zk.connect(proxied=True, session_timeout=6)
    other = zk.connect().semaphore("partition", capacity=1)
    permit = backend.semaphore("partition", capacity=1).acquire()
    cut_at = time.monotonic()
    zk.cut(backend, Cut.SILENT)
    assert permit.lost.wait(15), "no LOST while partitioned"
    # kazoo notices after its read timeout (2/3 of the session), then a session timeout
    assert time.monotonic() - cut_at <= 6 * (1 + 2 / 3) + 1
    other.acquire(timeout=10).release()  # the server expired the session meanwhile


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
    zk: ZooKeeperHarness, zookeeper_admin: Any, sr_namespace: str
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
    zk: ZooKeeperHarness, zookeeper_admin: Any, sr_namespace: str
) -> None:
    sem = zk.connect().semaphore("badentry", capacity=1)
    path = f"{sr_namespace}/semaphore_recipes/badentry"
    zookeeper_admin.create(f"{path}/e-garbage", b"")
    with pytest.raises(sr.CorruptState):
        sem.acquire(timeout=2)
    zookeeper_admin.delete(f"{path}/e-garbage")
    wait_until(lambda: zk.entries() == [])


def test_a_permit_lost_by_the_clients_own_verdict_is_deleted_when_the_session_lived(
    zk: ZooKeeperHarness, zookeeper_server: Any
) -> None:
    """After a whole session timeout disconnected, the backend takes its permits for
    LOST: the server may have expired the session unseen. When the session in fact
    lived (here a second connection kept it alive, as a new leader that re-arms the
    sessions does), releasing the LOST permit must still delete its entry, which would
    otherwise hold its permits until the session ends (found by the chaos campaign)."""
    from kazoo.client import KazooClient

    backend = zk.connect(proxied=True, session_timeout=6)
    keeper_proxy = FaultProxy(zookeeper_server.host_port)
    keeper_proxy.start()
    keeper = None
    try:
        sem = backend.semaphore("lost-verdict", capacity=1)
        permit = sem.acquire()
        session = backend.client.client_id
        zk.cut(backend, Cut.SILENT)
        keeper = KazooClient(hosts=keeper_proxy.address, client_id=session, timeout=6)
        keeper.start(timeout=10)  # the same session, kept alive on the server meanwhile
        assert permit.lost.wait(15), "the backend's own verdict never came"
        keeper_proxy.cut()  # the keeper goes quiet without closing the session
        zk.cut(backend)
        time.sleep(0.2)
        zk.restore(backend)  # the backend reconnects to the session that lived
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
        keeper_proxy.close()


def test_a_kazoo_wait_that_gives_up_before_the_deadline_is_waited_again() -> None:
    """kazoo raises its own timeout when its one wait returns without a value, which can
    be a moment before the acquire's deadline: that must never leave the library (the
    campaign saw acquire raise KazooTimeoutError); only AcquireTimeout may, at the end."""
    from types import SimpleNamespace

    from kazoo.handlers.threading import KazooTimeoutError

    from semaphore_recipes._core.deadline import Deadline

    class GivesUpOnce:
        calls = 0

        def get(self, block: bool, timeout: float | None) -> str:
            self.calls += 1
            if self.calls == 1:
                raise KazooTimeoutError("the wait returned without a value")
            return "the reply"

    backend = cast(Any, SimpleNamespace(client=None))

    def answering(deadline: Deadline) -> Answering:
        answers = Answering(backend)
        timed_out = lambda: sr.AcquireTimeout("no answer")  # noqa: E731
        answers.wait(Within(deadline, timed_out, "/early"))  # a program's first request
        return answers

    reply = GivesUpOnce()
    assert answering(Deadline(5.0, time.monotonic)).wait(reply) == "the reply"
    assert reply.calls == 2
    with pytest.raises(sr.AcquireTimeout):
        answering(Deadline(0.0, time.monotonic)).wait(GivesUpOnce())


def test_each_request_is_answered_within_the_bound_its_program_yielded_last() -> None:
    """One runner answers every ZooKeeper program: the program carries its bound (a
    Within before its first request; a program run inside another, as delete_all's
    delete per queue, bounds what follows with its own)."""
    from types import SimpleNamespace

    from kazoo.handlers.threading import KazooTimeoutError

    from semaphore_recipes._core.deadline import Deadline
    from semaphore_recipes._core.program import run_program

    class NoAnswer(Exception):
        pass

    class Silent:
        def get(self, block: bool, timeout: float | None) -> str:
            if timeout is not None and timeout <= 0:
                raise KazooTimeoutError("no value")
            return "a reply"

    def program() -> Any:
        yield Within(Deadline(5.0, time.monotonic), lambda: NoAnswer("outer"), "/p")
        assert (yield Silent()) == "a reply"
        yield Within(Deadline(0.0, time.monotonic), lambda: NoAnswer("inner"), "/p")
        yield Silent()

    backend = cast(Any, SimpleNamespace(client=None))
    with pytest.raises(NoAnswer, match="inner"):
        run_program(program(), Answering(backend).wait)

    def unbounded() -> Any:
        yield Silent()

    with pytest.raises(TypeError, match="Within"):
        run_program(unbounded(), Answering(backend).wait)


def test_a_connection_lost_as_the_enqueue_rereads_a_changed_capacity_is_waited_out(
    zk: ZooKeeperHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storm campaign saw acquire raise kazoo's ConnectionLoss: the listing showed a
    changed capacity, and the read that follows it lost its connection. The loss is put
    into the capacity reads only (the real server answers every other request): the
    watch's re-read first, so the cached capacity stays stale, then the enqueue's."""
    from kazoo.exceptions import ConnectionLoss

    backend = zk.connect()
    sem = backend.semaphore("reread", capacity=2)
    capacity_path = cast(ZooKeeperQueue, sem._store).path
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
