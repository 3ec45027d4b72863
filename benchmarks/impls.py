"""The measured implementations, behind one small interface.

Each one is a *client*: ``acquire()`` blocks until granted, ``release()`` gives it back,
``close()`` ends its session. The client libraries are imported only when an
implementation is built, so a worker interpreter needs only the library it measures
(python-etcd3 runs in interpreters with pure-Python protobuf, see ``peers``).

The floors are not semaphores: ``raw-zk`` is an ephemeral-sequential create (acquire)
and its delete (release); ``raw-etcd`` a put with a lease and a delete, through the
library's own gRPC layer (``raw-etcd-txn``, a control: the same put as a txn that
creates the key only if absent, the least an enqueue can send). :class:`WatchFloor`
is the predecessor-watch floor of the handoff: one process deletes a key, another
one's watch callback fires.
``ceiling-zk`` and ``ceiling-etcd`` are not semaphores either: each sends the fewest
requests a herd-free FIFO acquire that has to wait can send, and never waits
(docs/design.md section 9).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

#: What a run measures, by name: (backend, label in the tables).
IMPLS: dict[str, tuple[str, str]] = {
    "raw-zk": ("zookeeper", "raw create+delete (kazoo)"),
    "ceiling-zk": ("zookeeper", "ceiling: create + listing, one watch, delete; never waits"),
    "ours-zk": ("zookeeper", "semaphore-recipes Semaphore"),
    "kazoo-sem": ("zookeeper", "kazoo Semaphore"),
    "kazoo-lock": ("zookeeper", "kazoo Lock"),
    "raw-etcd": ("etcd", "raw put(lease)+delete (EtcdClient)"),
    "raw-etcd-purepb": ("etcd", "raw put(lease)+delete, pure-Python protobuf"),
    "raw-etcd-txn": ("etcd", "control: txn(create-if-absent put)+delete (EtcdClient)"),
    "ceiling-etcd": (
        "etcd",
        "ceiling: txn(create + listing), one watch from its revision, delete; never waits",
    ),
    "ours-etcd": ("etcd", "semaphore-recipes Semaphore"),
    "etcd3-lock": ("etcd", "python-etcd3 Lock"),
    # acquire_all over k semaphores (benchmarks.multi)
    "ours-zk-all1": ("zookeeper", "semaphore-recipes acquire_all of 1 semaphore"),
    "ours-zk-all3": ("zookeeper", "semaphore-recipes acquire_all of 3 semaphores"),
    "ours-etcd-all1": ("etcd", "semaphore-recipes acquire_all of 1 semaphore"),
    "ours-etcd-all3": ("etcd", "semaphore-recipes acquire_all of 3 semaphores"),
    "floor-zk": ("zookeeper", "raw predecessor-watch floor (delete -> watch fires)"),
    "floor-etcd": ("etcd", "raw predecessor-watch floor (delete -> watch event)"),
    # the asyncio face (benchmarks.aio_impls), each on one event loop
    "aio-raw-zk": ("zookeeper", "asyncio raw create+delete (kazoo async, awaited)"),
    "aio-ours-zk": ("zookeeper", "semaphore-recipes AsyncSemaphore"),
    "aio-raw-etcd": ("etcd", "asyncio raw put(lease)+delete (grpc.aio stubs)"),
    "aio-ours-etcd": ("etcd", "semaphore-recipes AsyncSemaphore"),
    "aio-ours-memory": ("memory", "semaphore-recipes AsyncSemaphore (in-process store)"),
    "aio-ours-redis": ("redis", "semaphore-recipes AsyncSemaphore"),
    "aio-floor-zk": ("zookeeper", "asyncio predecessor-watch floor (delete -> task woken)"),
    "aio-floor-etcd": ("etcd", "asyncio predecessor-watch floor (delete -> task woken)"),
}

ACQUIRE_TIMEOUT = 60.0


def now_ns() -> int:
    """CLOCK_MONOTONIC: the same clock in every process of this machine."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


@dataclass(frozen=True)
class Target:
    """Where a client connects, and which semaphore it uses."""

    zk_hosts: str  # host:port[,host:port]
    zk_chroot: str  # e.g. /sr-bench-1a2b3c (created by the orchestrator)
    etcd_endpoint: str  # host:port
    etcd_prefix: str  # e.g. /sr-bench-1a2b3c/
    name: str
    capacity: int
    session_timeout: float = 30.0
    url: str = ""  # the URL to connect to, when given (benchmarks.scale), else by backend

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Target:
        return cls(**data)

    def with_name(self, name: str, capacity: int | None = None) -> Target:
        return Target(
            self.zk_hosts,
            self.zk_chroot,
            self.etcd_endpoint,
            self.etcd_prefix,
            name,
            self.capacity if capacity is None else capacity,
            self.session_timeout,
            self.url,
        )

    @property
    def zk_url(self) -> str:
        return (
            f"zookeeper://{self.zk_hosts}{self.zk_chroot}?session_timeout={self.session_timeout:g}"
        )

    @property
    def etcd_url(self) -> str:
        prefix = self.etcd_prefix.rstrip("/")
        return f"etcd://{self.etcd_endpoint}{prefix}?session_timeout={self.session_timeout:g}"


class Client(Protocol):
    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def close(self) -> None: ...


def kazoo_client(target: Target) -> Any:
    """A started kazoo client inside the run's chroot."""
    client_mod = importlib.import_module("kazoo.client")
    client = client_mod.KazooClient(
        hosts=target.zk_hosts + target.zk_chroot, timeout=target.session_timeout
    )
    client.start(timeout=30)
    return client


class OursClient:
    """semaphore-recipes: ``sr.connect(url).semaphore(name, capacity)``."""

    def __init__(self, target: Target, backend: str) -> None:
        sr = importlib.import_module("semaphore_recipes")
        self.backend = sr.connect(target.zk_url if backend == "zookeeper" else target.etcd_url)
        self.semaphore = self.backend.semaphore(target.name, capacity=target.capacity)
        self._permit: Any = None

    def acquire(self) -> None:
        self._permit = self.semaphore.acquire(timeout=ACQUIRE_TIMEOUT)

    def release(self) -> None:
        self._permit.release()
        self._permit = None

    def queued(self) -> int:
        return len(self.semaphore.status().waiters)

    def close(self) -> None:
        self.backend.close()


class OursAllClient:
    """semaphore-recipes: ``backend.acquire_all`` over ``count`` semaphores at once."""

    def __init__(self, target: Target, backend: str, count: int) -> None:
        sr = importlib.import_module("semaphore_recipes")
        self.backend = sr.connect(target.zk_url if backend == "zookeeper" else target.etcd_url)
        self.weights = {}
        for i in range(count):
            name = f"{target.name}-{i}"
            self.backend.semaphore(name, capacity=target.capacity)
            self.weights[name] = 1
        self._permit: Any = None

    def acquire(self) -> None:
        self._permit = self.backend.acquire_all(self.weights, timeout=ACQUIRE_TIMEOUT)

    def release(self) -> None:
        self._permit.release()
        self._permit = None

    def close(self) -> None:
        self.backend.close()


class RawZooKeeper:
    """The floor: ephemeral-sequential create, then delete (synchronous kazoo calls)."""

    def __init__(self, target: Target, kind: str = "raw") -> None:
        self.client = kazoo_client(target)
        self.parent = f"/{kind}-{target.name}"
        self.prefix = f"{self.parent}/e-"
        self.client.ensure_path(self.parent)
        self._path = ""

    def acquire(self) -> None:
        self._path = self.client.create(self.prefix, b"{}", ephemeral=True, sequence=True)

    def release(self) -> None:
        self.client.delete(self._path)

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class HerdFreeCeiling(RawZooKeeper):
    """The requests of a contended, herd-free FIFO acquire, without the waiting.

    Such an acquire creates its entry, lists the queue (ZooKeeper answers a create and a
    listing sent back to back in one round trip, and no request does both), arms one
    watch of its own (a child watch set by the listing itself would fire for every
    waiter on every change: the herd) and, once its watch fired, is admitted; the
    release deletes. Here the watch goes on the predecessor and nothing waits for it:
    four requests and about one watch notification per cycle, the most throughput any
    such protocol gets from these clients on this server.
    """

    def __init__(self, target: Target) -> None:
        super().__init__(target, "ceiling")
        self._no_node = importlib.import_module("kazoo.exceptions").NoNodeError

    def acquire(self) -> None:
        create = self.client.create_async(self.prefix, b"{}", ephemeral=True, sequence=True)
        listing = self.client.get_children_async(self.parent, include_data=True)
        self._path = create.get()
        mine = self._path.rsplit("/", 1)[1]
        lower = [c for c in listing.get()[0] if c < mine]  # same prefix: sequence order
        if lower:  # a read with a watch, as a waiter arms one (gone: no watch is left)
            with contextlib.suppress(self._no_node):
                self.client.get(f"{self.parent}/{max(lower)}", watch=self._fired)

    def _fired(self, event: Any) -> None:
        pass  # delivered on kazoo's callback thread, as a real waiter's would be


class KazooSemaphore:
    """kazoo's ``Semaphore`` (one object, reused for every acquire, as documented)."""

    def __init__(self, target: Target, client: Any = None) -> None:
        self._own = client is None
        self.client = kazoo_client(target) if client is None else client
        self.path = f"/kazoo-{target.name}"
        self.semaphore = self.client.Semaphore(
            self.path, uuid.uuid4().hex[:8], max_leases=target.capacity
        )

    def acquire(self) -> None:
        if not self.semaphore.acquire(timeout=ACQUIRE_TIMEOUT):
            raise TimeoutError("kazoo Semaphore not acquired in time")

    def release(self) -> None:
        self.semaphore.release()

    def queued(self) -> int:
        """Blocked acquirers: every one of them is a contender of the internal lock."""
        lock_path = self.path + "-__lock__"
        if self.client.exists(lock_path) is None:
            return 0
        return len(self.client.get_children(lock_path))

    def close(self) -> None:
        if self._own:
            self.client.stop()
            self.client.close()


class KazooLock:
    """kazoo's ``Lock`` (a mutex; one object, reused)."""

    def __init__(self, target: Target) -> None:
        self.client = kazoo_client(target)
        self.lock = self.client.Lock(f"/kazoo-lock-{target.name}", uuid.uuid4().hex[:8])

    def acquire(self) -> None:
        if not self.lock.acquire(timeout=ACQUIRE_TIMEOUT):
            raise TimeoutError("kazoo Lock not acquired in time")

    def release(self) -> None:
        self.lock.release()

    def close(self) -> None:
        self.client.stop()
        self.client.close()


RAW_LEASE_TTL = 24 * 3600  # seconds: longer than any benchmark run


def etcd_client(target: Target) -> Any:
    client_mod = importlib.import_module("semaphore_recipes.etcd.client")
    return client_mod.EtcdClient([target.etcd_endpoint])


class RawEtcd:
    """The floor: put with a lease, then delete, through ``EtcdClient`` (one lease per
    client, granted once, as the library's session lease is). The lease outlives any run
    without keepalives, so none is counted in the floor's messages and it cannot expire
    under a run stretched by a loaded machine (revoked at the end)."""

    def __init__(self, target: Target) -> None:
        self.client = etcd_client(target)
        self.lease, _ = self.client.lease_grant(RAW_LEASE_TTL)
        self.key = f"{target.etcd_prefix}raw-{target.name}/{uuid.uuid4().hex}".encode()

    def acquire(self) -> None:
        self.client.put(self.key, b"{}", lease=self.lease)

    def release(self) -> None:
        self.client.delete_range(self.key)

    def close(self) -> None:
        try:
            self.client.lease_revoke(self.lease)
        finally:
            self.client.close()


class RawEtcdTxn(RawEtcd):
    """The etcd floor's put made a txn that creates the key only if it is absent (a
    compare of its create_revision with 0), as every enqueue must be: what etcd's txn
    path itself costs over a put, with no range and nothing of the library."""

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self._ops = importlib.import_module("semaphore_recipes.etcd.ops")

    def acquire(self) -> None:
        ops = self._ops
        reply = self.client.txn(
            [ops.Compare.create_revision(self.key, "==", 0)],
            [ops.Op.put(self.key, b"{}", lease=self.lease)],
        )
        if not reply.succeeded:
            raise RuntimeError("the control's key was there already")


class EtcdCeiling(RawEtcd):
    """The requests of a contended, herd-free FIFO acquire on etcd, without the waiting.

    Such an acquire creates its entry on its lease and lists the queue in one txn (a
    create-if-absent put, then a range that sees it), arms one watch of its own on its
    predecessor from the txn's revision on (what changed since is replayed: no read
    before it; a watch on the queue's prefix would wake every waiter on every change,
    the herd), cancels that watch once it fired (etcd never ends one by itself) and,
    admitted, later deletes its entry. Here nothing waits for the watch: four requests
    per cycle (the txn, the watch's create and cancel, the delete) and about one event,
    through the library's own gRPC layer and watch stream, the most throughput any such
    protocol gets from these clients on this server.
    """

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        pb = importlib.import_module("semaphore_recipes.etcd._proto.etcd_api_pb2")
        self._watch = importlib.import_module("semaphore_recipes.etcd.watch")
        self._delete = pb.Event.DELETE
        prefix = f"{target.etcd_prefix}ceiling-{target.name}/"
        self.key = f"{prefix}{uuid.uuid4().hex}".encode()
        self.capacity = target.capacity
        absent = pb.Compare(
            result=pb.Compare.EQUAL, target=pb.Compare.CREATE, key=self.key, create_revision=0
        )
        put = pb.PutRequest(key=self.key, value=b"{}", lease=self.lease)
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        listing = pb.RangeRequest(key=prefix.encode(), range_end=end.encode(), keys_only=True)
        self._create = (
            [absent],
            [pb.RequestOp(request_put=put), pb.RequestOp(request_range=listing)],
        )

    def acquire(self) -> None:
        reply = self.client.txn(*self._create)
        if not reply.succeeded:
            raise RuntimeError("the ceiling's key was there already")
        token = reply.header.revision  # the txn's one write: our create_revision
        lower = [kv for kv in reply.responses[1].response_range.kvs if kv.create_revision < token]
        if len(lower) >= self.capacity:  # it would wait: one watch on its predecessor
            nearest = max(lower, key=lambda kv: kv.create_revision)
            self._arm(nearest.key, token + 1)

    def _arm(self, key: bytes, start_revision: int) -> None:
        armed: list[Any] = []

        def on_events(events: list[Any], revision: int) -> None:
            # a held mark would come as a put; the delete is what a waiter waits for
            if armed and any(event.type == self._delete for event in events):
                armed.pop().cancel()  # delivered on the watch stream's thread, as a waiter's

        armed.append(
            self._watch.Watcher(
                self.client, key, start_revision=start_revision, on_events=on_events
            )
        )


class Etcd3Lock:
    """python-etcd3's ``Lock`` (a mutex; one object, reused). Its acquire grants a new
    lease and runs a create-if-absent txn; a loser waits with ``watch_once`` on the key."""

    def __init__(self, target: Target) -> None:
        etcd3 = importlib.import_module("etcd3")
        host, port = target.etcd_endpoint.rsplit(":", 1)
        self.client = etcd3.client(host=host, port=int(port))
        name = f"{target.etcd_prefix.strip('/')}-{target.name}"
        self.lock = self.client.lock(name, ttl=int(target.session_timeout))

    def acquire(self) -> None:
        if not self.lock.acquire(timeout=ACQUIRE_TIMEOUT):
            raise TimeoutError("python-etcd3 Lock not acquired in time")

    def release(self) -> None:
        self.lock.release()

    def close(self) -> None:
        self.client.close()


def make_client(impl: str, target: Target) -> Client:
    if impl == "ours-zk":
        return OursClient(target, "zookeeper")
    if impl == "ours-etcd":
        return OursClient(target, "etcd")
    if impl.startswith("ours-zk-all") or impl.startswith("ours-etcd-all"):
        backend = "zookeeper" if impl.startswith("ours-zk") else "etcd"
        return OursAllClient(target, backend, int(impl.rsplit("all", 1)[1]))
    if impl == "raw-zk":
        return RawZooKeeper(target)
    if impl == "ceiling-zk":
        return HerdFreeCeiling(target)
    if impl in ("raw-etcd", "raw-etcd-purepb"):
        return RawEtcd(target)
    if impl == "raw-etcd-txn":
        return RawEtcdTxn(target)
    if impl == "ceiling-etcd":
        return EtcdCeiling(target)
    if impl == "kazoo-sem":
        return KazooSemaphore(target)
    if impl == "kazoo-lock":
        return KazooLock(target)
    if impl == "etcd3-lock":
        return Etcd3Lock(target)
    raise ValueError(f"unknown implementation {impl!r}")


class WatchFloor:
    """The raw predecessor-watch floor of a handoff, in two processes.

    The holder ``hold(i)``s key i (creates it) and ``delete(i)``s it; the waiter
    ``arm(i)``s a watch on key i and ``fired_at()`` returns when the callback saw the
    deletion (the callback's own clock reading).
    """

    def __init__(self, target: Target, backend: str) -> None:
        self.backend = backend
        self._fired = threading.Event()
        self._fired_ns = 0
        self._watcher: Any = None
        if backend == "zookeeper":
            self.zk = kazoo_client(target)
            self.base = f"/floor-{target.name}"
            self.zk.ensure_path(self.base)
        else:
            self.etcd = etcd_client(target)
            self.lease, _ = self.etcd.lease_grant(RAW_LEASE_TTL)
            self.base = f"{target.etcd_prefix}floor-{target.name}"

    def _key(self, i: int) -> str:
        return f"{self.base}/k{i}"

    def hold(self, i: int) -> None:
        if self.backend == "zookeeper":
            self.zk.create(self._key(i), b"{}", ephemeral=True)
        else:
            self.etcd.put(self._key(i).encode(), b"{}", lease=self.lease)

    def delete(self, i: int) -> None:
        if self.backend == "zookeeper":
            self.zk.delete(self._key(i))
        else:
            self.etcd.delete_range(self._key(i).encode())

    def arm(self, i: int) -> None:
        """Set the watch; returns once the server has it."""
        self._fired.clear()
        if self.backend == "zookeeper":
            events = importlib.import_module("kazoo.protocol.states")

            def fired(event: Any) -> None:
                if event.type == events.EventType.DELETED:
                    self._fired_ns = now_ns()
                    self._fired.set()

            if self.zk.exists(self._key(i), watch=fired) is None:
                raise RuntimeError(f"floor key {self._key(i)} does not exist")
            return
        watch_mod = importlib.import_module("semaphore_recipes.etcd.watch")
        pb = importlib.import_module("semaphore_recipes.etcd._proto.etcd_api_pb2")

        def on_events(evs: list[Any], revision: int) -> None:
            if any(e.type == pb.Event.DELETE for e in evs) and not self._fired.is_set():
                self._fired_ns = now_ns()
                self._fired.set()

        self._watcher = watch_mod.Watcher(
            self.etcd, self._key(i).encode(), start_revision=0, on_events=on_events
        )
        if not self._watcher.created.wait(30):
            raise RuntimeError("etcd watch not created in time")

    def fired_at(self) -> int:
        if not self._fired.wait(ACQUIRE_TIMEOUT):
            raise TimeoutError("the floor's watch never fired")
        if self._watcher is not None:
            self._watcher.cancel(timeout=1)
            self._watcher = None
        return self._fired_ns

    def close(self) -> None:
        if self.backend == "zookeeper":
            self.zk.stop()
            self.zk.close()
        else:
            try:
                self.etcd.lease_revoke(self.lease)
            finally:
                self.etcd.close()
