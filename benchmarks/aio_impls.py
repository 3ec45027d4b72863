"""The asyncio implementations measured, behind one small awaitable interface.

Each one is an *async client*: ``await acquire()`` until granted, ``await release()``,
``await close()``; all of it on the worker's one event loop. The floors are not
semaphores, and use no code of the library but its generated etcd stubs:

- ``aio-raw-zk``: kazoo's ``create_async`` (ephemeral) and ``delete_async``, each
  awaited from the loop (kazoo's callback thread settles a future of the loop through
  ``loop.call_soon_threadsafe``: :func:`kazoo_reply`);
- ``aio-raw-etcd``: a ``Put`` with a lease granted once, then a ``DeleteRange``, over a
  ``grpc.aio`` channel with the stubs of ``semaphore_recipes.etcd._proto``;
- :class:`AioWatchFloor`: the predecessor-watch floor of the handoff, awaited: one
  process deletes a key, a task of another process's loop is woken by its watch
  (ZooKeeper: an ``exists`` watch; etcd: one watch on a ``grpc.aio`` Watch stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import uuid
from typing import Any, Protocol

from .impls import ACQUIRE_TIMEOUT, RAW_LEASE_TTL, Target, kazoo_client, now_ns


class AsyncClient(Protocol):
    async def acquire(self) -> None: ...
    async def release(self) -> None: ...
    async def close(self) -> None: ...


def url_of(target: Target, backend: str) -> str:
    """The URL ``sr.aio.connect`` takes for ``backend`` (memory: one store per name)."""
    if target.url:
        return target.url
    if backend == "zookeeper":
        return target.zk_url
    if backend == "etcd":
        return target.etcd_url
    return f"memory://bench-{target.name}"


def async_face_missing(backend: str) -> str | None:
    """Why ``backend`` cannot be measured from asyncio in this checkout, or None."""
    registry = importlib.import_module("semaphore_recipes.registry")
    try:
        scheme = "memory" if backend == "memory" else backend
        if registry.backend_class(scheme).capabilities.async_face:
            return None
    except Exception as exc:
        return f"the {backend} backend cannot be loaded: {exc}"
    return f"the {backend} backend has no asyncio face in this checkout"


class AioOurs:
    """semaphore-recipes: ``await sr.aio.connect(url)``, ``backend.semaphore(...)``."""

    def __init__(self, backend: Any, semaphore: Any) -> None:
        self.backend = backend
        self.semaphore = semaphore
        self._permit: Any = None

    @classmethod
    async def open(cls, target: Target, backend: str) -> AioOurs:
        sr = importlib.import_module("semaphore_recipes")
        connected = await sr.aio.connect(url_of(target, backend))
        semaphore = connected.semaphore(target.name, capacity=target.capacity)
        await semaphore.open()
        return cls(connected, semaphore)

    async def acquire(self) -> None:
        self._permit = await self.semaphore.acquire(timeout=ACQUIRE_TIMEOUT)

    async def release(self) -> None:
        await self._permit.release()
        self._permit = None

    async def close(self) -> None:
        await self.backend.close()


def kazoo_reply(result: Any) -> asyncio.Future[Any]:
    """A future of the running loop settled with the kazoo request ``result``'s value
    (or exception) from kazoo's callback thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(done: Any) -> None:
        if future.done():
            return
        try:
            future.set_result(done.get(block=False))
        except Exception as exc:
            future.set_exception(exc)

    result.rawlink(lambda done: loop.call_soon_threadsafe(settle, done))
    return future


class AioRawZooKeeper:
    """The floor: ephemeral create, then delete, each awaited (kazoo async calls)."""

    def __init__(self, target: Target) -> None:
        self.client = kazoo_client(target)
        self.parent = f"/aio-raw-{target.name}"
        self.client.ensure_path(self.parent)
        self._path = ""

    async def acquire(self) -> None:
        prefix = f"{self.parent}/e-"
        self._path = await kazoo_reply(
            self.client.create_async(prefix, b"{}", ephemeral=True, sequence=True)
        )

    async def release(self) -> None:
        await kazoo_reply(self.client.delete_async(self._path))

    async def close(self) -> None:
        self.client.stop()
        self.client.close()


class AioEtcdStubs:
    """A ``grpc.aio`` channel to the run's etcd with the generated KV, Lease and Watch
    stubs, and one lease granted once (it outlives any run without keepalives, as the
    sync floor's; revoked at the end)."""

    def __init__(self, target: Target) -> None:
        grpc = importlib.import_module("grpc")
        self.pb = importlib.import_module("semaphore_recipes.etcd._proto.etcd_api_pb2")
        rpc = importlib.import_module("semaphore_recipes.etcd._proto.etcd_api_pb2_grpc")
        self.channel = grpc.aio.insecure_channel(target.etcd_endpoint)
        self.eof = grpc.aio.EOF
        self.kv = rpc.KVStub(self.channel)
        self.leases = rpc.LeaseStub(self.channel)
        self.watch = rpc.WatchStub(self.channel)
        self.lease = 0

    async def grant(self) -> None:
        reply = await self.leases.LeaseGrant(self.pb.LeaseGrantRequest(TTL=RAW_LEASE_TTL))
        self.lease = reply.ID

    async def put(self, key: bytes) -> None:
        await self.kv.Put(self.pb.PutRequest(key=key, value=b"{}", lease=self.lease))

    async def delete(self, key: bytes) -> None:
        await self.kv.DeleteRange(self.pb.DeleteRangeRequest(key=key))

    async def close(self) -> None:
        try:
            if self.lease:
                await self.leases.LeaseRevoke(self.pb.LeaseRevokeRequest(ID=self.lease))
        finally:
            await self.channel.close()


class AioRawEtcd:
    """The floor: ``Put`` with the lease, then ``DeleteRange``, awaited (grpc.aio)."""

    def __init__(self, stubs: AioEtcdStubs, key: bytes) -> None:
        self.stubs = stubs
        self.key = key

    @classmethod
    async def open(cls, target: Target) -> AioRawEtcd:
        stubs = AioEtcdStubs(target)
        await stubs.grant()
        return cls(stubs, f"{target.etcd_prefix}aio-raw-{target.name}/{uuid.uuid4().hex}".encode())

    async def acquire(self) -> None:
        await self.stubs.put(self.key)

    async def release(self) -> None:
        await self.stubs.delete(self.key)

    async def close(self) -> None:
        await self.stubs.close()


async def make_aio_client(impl: str, target: Target) -> AsyncClient:
    if impl == "aio-raw-zk":
        return AioRawZooKeeper(target)
    if impl == "aio-raw-etcd":
        return await AioRawEtcd.open(target)
    backends = {
        "aio-ours-zk": "zookeeper",
        "aio-ours-etcd": "etcd",
        "aio-ours-memory": "memory",
        "aio-ours-redis": "redis",
    }
    if impl in backends:
        return await AioOurs.open(target, backends[impl])
    raise ValueError(f"unknown asyncio implementation {impl!r}")


class AioWatchFloor:
    """The raw predecessor-watch floor of a handoff, awaited, in two processes.

    The holder ``hold(i)``s key i (creates it) and ``delete(i)``s it; the waiter
    ``arm(i)``s a watch on key i (returns once the server has it) and ``fired_at()``
    returns the clock reading of the loop's task woken by the deletion.
    """

    def __init__(self, target: Target, backend: str) -> None:
        self.backend = backend
        self.target = target
        self._fired: asyncio.Future[None] | None = None
        if backend == "zookeeper":
            self.zk = kazoo_client(target)
            self.base = f"/aio-floor-{target.name}"
            self.zk.ensure_path(self.base)
        else:
            self.etcd = AioEtcdStubs(target)
            self.base = f"{target.etcd_prefix}aio-floor-{target.name}"
            self._stream: Any = None
            self._reader: asyncio.Task[None] | None = None
            self._created: asyncio.Queue[int] = asyncio.Queue()
            self._watch_id = -1

    def _key(self, i: int) -> str:
        return f"{self.base}/k{i}"

    async def open(self) -> None:
        if self.backend == "etcd":
            await self.etcd.grant()

    async def hold(self, i: int) -> None:
        if self.backend == "zookeeper":
            await kazoo_reply(self.zk.create_async(self._key(i), b"{}", ephemeral=True))
        else:
            await self.etcd.put(self._key(i).encode())

    async def delete(self, i: int) -> None:
        if self.backend == "zookeeper":
            await kazoo_reply(self.zk.delete_async(self._key(i)))
        else:
            await self.etcd.delete(self._key(i).encode())

    async def arm(self, i: int) -> None:
        loop = asyncio.get_running_loop()
        fired = self._fired = loop.create_future()
        if self.backend == "zookeeper":
            events = importlib.import_module("kazoo.protocol.states")

            def on_event(event: Any) -> None:  # kazoo's callback thread
                if event.type == events.EventType.DELETED:
                    loop.call_soon_threadsafe(_set, fired)

            stat = await kazoo_reply(self.zk.exists_async(self._key(i), watch=on_event))
            if stat is None:
                raise RuntimeError(f"floor key {self._key(i)} does not exist")
            return
        pb = self.etcd.pb
        if self._stream is None:
            self._stream = self.etcd.watch.Watch()
            self._reader = asyncio.ensure_future(self._read_events())
        create = pb.WatchCreateRequest(key=self._key(i).encode())
        await self._stream.write(pb.WatchRequest(create_request=create))
        self._watch_id = await asyncio.wait_for(self._created.get(), 30)

    async def _read_events(self) -> None:
        delete = self.etcd.pb.Event.DELETE
        while True:
            reply = await self._stream.read()
            if reply is self.etcd.eof:  # the stream ended
                return
            if reply.created:
                self._created.put_nowait(reply.watch_id)
            elif (
                reply.watch_id == self._watch_id
                and self._fired is not None
                and any(e.type == delete for e in reply.events)
            ):
                _set(self._fired)

    async def fired_at(self) -> int:
        assert self._fired is not None
        await asyncio.wait_for(self._fired, ACQUIRE_TIMEOUT)
        t = now_ns()
        if self.backend == "etcd":
            cancel = self.etcd.pb.WatchCancelRequest(watch_id=self._watch_id)
            self._watch_id = -1
            await self._stream.write(self.etcd.pb.WatchRequest(cancel_request=cancel))
        return t

    async def close(self) -> None:
        if self.backend == "zookeeper":
            self.zk.stop()
            self.zk.close()
            return
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        if self._stream is not None:
            self._stream.cancel()
        await self.etcd.close()


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
