"""The asyncio face of the etcd layer against real etcd members: the grpc.aio client and
its auth token, the lease keeper task (suspended, restored, expired), and the watch
stream task resumed after a restart without missing or repeating an event."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from semaphore_recipes.etcd.aio_client import AioEtcdClient
from semaphore_recipes.etcd.aio_lease import AsyncLeaseKeeper
from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.errors import EtcdAuthError, EtcdError
from semaphore_recipes.etcd.ops import prefix_range_end
from semaphore_recipes.etcd.rpc import Call, granted_lease
from semaphore_recipes.etcd.watch import Event, Watcher
from semaphore_recipes.testing.etcd_auth import EtcdAuthAdmin
from semaphore_recipes.testing.etcd_server import EtcdServer

from .helpers import busy_loop_for, wait_until

USER, PASSWORD = "root", "s3cret"


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"no {what} in {timeout} s"
        await asyncio.sleep(0.02)


async def retried(call: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    """``call()`` until it stops failing (a member restarting)."""
    end = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except Exception:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def auth_server() -> Iterator[EtcdServer]:
    with EtcdServer(name="aio-auth") as server:
        with EtcdAuthAdmin(server.endpoint) as admin:
            admin.enable_auth(root_password=PASSWORD)
        yield server


def test_aio_client_auth_token_refreshed_once_and_used_by_the_watch_stream(
    auth_server: EtcdServer, ns: str
) -> None:
    async def main() -> None:
        anonymous = AioEtcdClient([auth_server.endpoint])
        with pytest.raises(EtcdAuthError):
            await anonymous.execute(Call.put(ns + "k", b"v"))
        await anonymous.close()

        client = AioEtcdClient([auth_server.endpoint], user=USER, password=PASSWORD)
        try:
            await client.execute(Call.put(ns + "k", b"v"))
            client._auth.token = "not-a-token"  # as after a token expiry
            assert (await client.execute(Call.range(ns + "k"))).count == 1
            assert client._auth.token != "not-a-token"

            client._auth.token = "stale"  # the watch stream must log in again too
            got: list[int] = []
            watcher = Watcher(
                client, ns + "w", start_revision=0, on_events=lambda evs, rev: got.append(rev)
            )
            await until(watcher.created.is_set, 10.0, "watch created")
            rev = (await client.execute(Call.put(ns + "w", b"1"))).header.revision
            await until(lambda: got == [rev], 5.0, "the event")
            watcher.cancel()

            # the lease keeper's own connection logs in with the same credentials
            # (etcd 3.4 does not check the token of a keepalive stream: a stale one
            # cannot be shown refused here)
            lease, ttl = granted_lease(await client.execute(Call.lease_grant(10)))
            rec = Recorder()
            keeper = rec.keeper(client, lease, ttl, interval=0.1)
            started = time.monotonic()
            await until(lambda: keeper.last_ack > started + 0.2, 5.0, "acks")
            assert client.keepalive_client._auth.token not in (None, client._auth.token)
            assert rec.names() == []
            keeper.stop()
            await client.execute(Call.lease_revoke(lease))
        finally:
            await client.close()
        assert client.keepalive_client.closed

    run(main)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def keeper(self, client: AioEtcdClient, lease: int, ttl: int, **kw: Any) -> AsyncLeaseKeeper:
        keeper = AsyncLeaseKeeper(
            client,
            lease,
            ttl,
            on_expired=lambda: self.calls.append(("expired", time.monotonic())),
            on_suspended=lambda: self.calls.append(("suspended", time.monotonic())),
            on_restored=lambda: self.calls.append(("restored", time.monotonic())),
            **kw,
        )
        keeper.start()
        return keeper

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def test_keeper_task_suspended_while_paused_restored_then_expired_by_a_revoke(
    scratch_server: EtcdServer,
) -> None:
    async def main() -> None:
        client = AioEtcdClient([scratch_server.endpoint])
        try:
            lease, ttl = granted_lease(await client.execute(Call.lease_grant(20)))
            rec = Recorder()
            keeper = rec.keeper(client, lease, ttl, interval=0.2, suspend_after=0.6)
            await until(lambda: time.monotonic() - keeper.last_ack < 0.1, 2.0, "a first ack")
            scratch_server.pause()
            paused_at = time.monotonic()
            try:
                await until(lambda: rec.names() == ["suspended"], 3.0, "suspension")
                assert rec.calls[0][1] - paused_at < 0.6 + 0.4
                await asyncio.sleep(0.8)  # stays suspended, reported once per episode
                assert rec.names() == ["suspended"]
            finally:
                scratch_server.resume()
            await until(lambda: rec.names() == ["suspended", "restored"], 5.0, "restore")
            assert not keeper.suspended
            await client.execute(Call.lease_revoke(lease))
            await until(lambda: "expired" in rec.names(), 5.0, "expiry")
            assert rec.names() == ["suspended", "restored", "expired"]
            await until(lambda: not keeper.running, 2.0, "the tasks' end")
        finally:
            await client.close()

    run(main)


def test_keeper_acknowledged_while_the_loop_is_starved(etcd_server: EtcdServer) -> None:
    """A loop kept busy for three TTLs by a callback storm: the keepalives go on and are
    acknowledged meanwhile (the keeper is not a task of the loop), so the lease is
    neither suspended nor expired, and the server still has it."""

    async def main() -> None:
        client = AioEtcdClient([etcd_server.endpoint])
        try:
            lease, ttl = granted_lease(await client.execute(Call.lease_grant(2)))
            rec = Recorder()
            keeper = rec.keeper(client, lease, ttl)
            await until(lambda: time.monotonic() - keeper.last_ack < 0.1, 2.0, "a first ack")
            started = time.monotonic()
            await busy_loop_for(3.0 * ttl)
            assert time.monotonic() - started >= 3.0 * ttl
            assert keeper.last_ack > started + ttl  # acknowledged during the storm
            await asyncio.sleep(0.2)  # (reports made during the storm reach the loop)
            assert rec.names() == []
            reply = await client.execute(Call.lease_time_to_live(lease))
            assert reply.TTL > 0
            keeper.stop()
            await client.execute(Call.lease_revoke(lease))
        finally:
            await client.close()

    run(main)


def test_keeper_stops_once_its_loop_is_closed(etcd_server: EtcdServer) -> None:
    """A program ends without stopping its keeper or closing its client: once the loop
    is closed the keeper's threads end and the lease expires, as with a task."""
    kept: list[tuple[AioEtcdClient, AsyncLeaseKeeper, int]] = []

    async def main() -> None:
        client = AioEtcdClient([etcd_server.endpoint])
        lease, ttl = granted_lease(await client.execute(Call.lease_grant(2)))
        keeper = Recorder().keeper(client, lease, ttl)
        kept.append((client, keeper, lease))
        await until(lambda: time.monotonic() - keeper.last_ack < 0.1, 2.0, "a first ack")

    run(main)
    client, keeper, lease = kept[0]
    wait_until(lambda: not keeper.running, 3.0, "the keeper's end")
    with EtcdClient([etcd_server.endpoint]) as admin:
        wait_until(lambda: admin.lease_time_to_live(lease).TTL == -1, 10.0, "the expiry")
    client.keepalive_client.close()


def test_watch_task_resumes_after_restarts_without_missing_or_repeating_events(
    scratch_server: EtcdServer, ns: str
) -> None:
    async def main() -> None:
        wclient = AioEtcdClient([scratch_server.endpoint])
        writer = AioEtcdClient([scratch_server.endpoint])
        seen: list[tuple[str, str, int]] = []

        def on_events(events: list[Event], revision: int) -> None:
            for e in events:
                kind = "DELETE" if e.type == Event.DELETE else "PUT"
                seen.append((kind, e.kv.key.decode(), e.kv.mod_revision))

        try:
            start = (await writer.execute(Call.put(ns + "k0", b"x"))).header.revision + 1
            watcher = Watcher(
                wclient, ns, prefix_range_end(ns), start_revision=start, on_events=on_events
            )
            await until(watcher.created.is_set, 5.0, "watch created")
            first = (await writer.execute(Call.put(ns + "k1", b"x"))).header.revision
            await until(lambda: len(seen) == 1, 5.0, "the first event")
            revisions = [first]
            for round_ in range(2):
                await asyncio.to_thread(scratch_server.restart)
                put = Call.put(f"{ns}k{round_ + 2}", b"x")
                reply = await retried(functools.partial(writer.execute, put))
                revisions.append(reply.header.revision)
                await until(lambda: len(seen) == len(revisions), 10.0, "events after restart")
            delete = await writer.execute(Call.delete_range(ns + "k1"))
            revisions.append(delete.header.revision)
            await until(lambda: len(seen) == len(revisions), 5.0, "the delete")
            assert [rev for _, _, rev in seen] == revisions
            assert seen[-1][0] == "DELETE"
            assert watcher.reconnects >= 2
            watcher.cancel()
            assert not watcher.running
        finally:
            await wclient.close()
            await writer.close()

    run(main)


def test_a_cancelled_call_leaves_the_client_usable(etcd_server: EtcdServer, ns: str) -> None:
    async def main() -> None:
        client = AioEtcdClient([etcd_server.endpoint])
        try:
            for _ in range(20):
                task = asyncio.ensure_future(client.execute(Call.put(ns + "c", b"x")))
                await asyncio.sleep(0)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert (await client.execute(Call.put(ns + "c", b"y"))).header.revision > 0
            assert (await client.execute(Call.range(ns + "c"))).kvs[0].value == b"y"
        finally:
            await client.close()

    run(main)


def test_a_call_on_its_way_when_the_client_closes_ends_with_an_etcd_error(
    scratch_server: EtcdServer,
) -> None:
    """Closing the channel cancels the calls on it; the task awaiting one hears the
    close as an EtcdError, not as a CancelledError it never asked for."""

    async def main() -> None:
        client = AioEtcdClient([scratch_server.endpoint])
        await client.execute(Call.range(b"/warm-up"))
        scratch_server.pause()  # the next call gets no reply
        try:
            call = asyncio.ensure_future(client.execute(Call.range(b"/never-answered")))
            await asyncio.sleep(0.3)
            assert not call.done()
            await client.close()
            with pytest.raises(EtcdError, match="closed"):
                await call
            assert not call.cancelled()
        finally:
            scratch_server.resume()

    run(main)
