"""A store with restricted users, per backend, for the permission tests (library, CLI).

``writer`` has every right on the test's semaphores, ``reader`` may only read them:
on etcd, roles on the key prefix of a server with auth enabled (set up over the Auth
gRPC service); on ZooKeeper, the digest ACL every node gets from the writer's client
(writer: all, reader: read); on Redis, ACL users on the key pattern: the writer every
command, the reader the monitoring user of docs/operations.md (the default user is off),
as docs/operations.md describes.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import semaphore_recipes as sr

WRITER = ("worker", "w-secret")
READER = ("reader", "r-secret")
ETCD_ROOT_PASSWORD = "root-secret"
ETCD_PREFIX = "/secured/"  # what the etcd roles are granted on
REDIS_PATTERN = "secured-*"  # the keys the Redis users may touch
#: the commands of docs/operations.md's Redis ACL lines (after ``-@all``): the worker's,
#: the read-only monitoring user's, and what both add on Redis Cluster
REDIS_WORKER_COMMANDS = (
    "+evalsha +eval +script|load +evalsha_ro +eval_ro +blpop +get +set +del +scan +ping +wait"
    " +exists +pexpire +pttl +time +incr +rpush"
    " +hget +hmget +hset +hdel +zadd +zrem +zrange +zrevrangebyscore +zcount"
    " +sadd +srem +smembers"
)
REDIS_MONITOR_COMMANDS = "+ping +evalsha_ro +eval_ro +hmget +hget +zrange +exists +scan"
REDIS_CLUSTER_COMMANDS = "+cluster|slots +cluster|shards +readonly +command"
REDIS_CLUSTER_WORKER_COMMANDS = "+spublish +ssubscribe +sunsubscribe +lpop"
REDIS_ADMIN = ("admin", "a-secret")


@dataclass
class SecuredStore:
    kind: str
    url_for: Callable[[str, str], str]  #: (user, password) -> URL of the test's namespace
    connect_writer: Callable[[], Any]  #: a backend creating with the restricted rights
    stored: Callable[[str], bool]  #: is the semaphore stored (read with full rights)
    entries: Callable[[str], int]  #: how many queue entries it has
    where: Callable[[str], str]  #: the path/key the errors name for a semaphore
    forbidden: str  #: a path/key (as a fenced transaction takes it) the writer may not create
    _backends: list[Any] = field(default_factory=list)

    @property
    def reader_url(self) -> str:
        return self.url_for(*READER)

    def writer(self) -> Any:
        backend = self.connect_writer()
        self._backends.append(backend)
        return backend

    def reader(self, password: str = READER[1]) -> Any:
        backend = sr.connect(self.url_for(READER[0], password))
        self._backends.append(backend)
        return backend

    def close(self) -> None:
        for backend in self._backends:
            backend.close()


@pytest.fixture(scope="session")
def _secured_etcd() -> Iterator[Any]:
    from semaphore_recipes.testing.etcd_auth import Access, EtcdAuthAdmin
    from semaphore_recipes.testing.etcd_server import EtcdServer

    with EtcdServer(name="secured") as server:
        with EtcdAuthAdmin(server.endpoint) as admin:
            admin.enable_auth(root_password=ETCD_ROOT_PASSWORD)
            admin.add_user(*WRITER, prefix=ETCD_PREFIX, access=Access.READWRITE)
            admin.add_user(*READER, prefix=ETCD_PREFIX, access=Access.READ)
        yield server


def _etcd_store(server: Any) -> Iterator[SecuredStore]:
    from semaphore_recipes.etcd.client import EtcdClient
    from semaphore_recipes.etcd.ops import prefix_range_end

    prefix = f"{ETCD_PREFIX}{uuid.uuid4().hex[:10]}"
    root = EtcdClient([server.endpoint], user="root", password=ETCD_ROOT_PASSWORD)

    def url_for(user: str, password: str) -> str:
        return f"etcd://{server.endpoint}{prefix}?user={user}&password={password}"

    def entries(name: str) -> int:
        start = f"{prefix}/{name}/entries/".encode()
        return len(root.range(start, prefix_range_end(start)).kvs)

    store = SecuredStore(
        "etcd",
        url_for,
        lambda: sr.connect(url_for(*WRITER)),
        lambda name: bool(root.range(f"{prefix}/{name}/config").kvs),
        entries,
        lambda name: f"{prefix}/{name}/",
        f"/outside/{uuid.uuid4().hex[:10]}",  # the roles cover ETCD_PREFIX only
    )
    try:
        yield store
    finally:
        store.close()
        root.close()


def _zookeeper_store(server: Any, namespace: str) -> Iterator[SecuredStore]:
    from kazoo.client import KazooClient
    from kazoo.security import make_digest_acl

    acl = [make_digest_acl(*WRITER, all=True), make_digest_acl(*READER, read=True)]
    admin = KazooClient(hosts=server.host_port, auth_data=[("digest", ":".join(WRITER))])
    admin.start(timeout=15)
    # the ACL on the namespace only: its parents are shared with other tests
    admin.ensure_path(namespace.rsplit("/", 1)[0])
    admin.create(namespace, acl=acl)
    admin.create(f"{namespace}/locked", acl=[make_digest_acl(*WRITER, read=True)])

    def connect_writer() -> Any:
        client = KazooClient(
            hosts=server.host_port + namespace,
            auth_data=[("digest", ":".join(WRITER))],
            default_acl=acl,
            timeout=4.0,
        )
        client.start(timeout=15)
        clients.append(client)
        return sr.connect(client)

    def path(name: str) -> str:
        return f"{namespace}/semaphore_recipes/{name}"

    def entries(name: str) -> int:
        return len(admin.get_children(path(name))) if admin.exists(path(name)) else 0

    clients: list[Any] = []
    store = SecuredStore(
        "zookeeper",
        lambda user, password: (
            f"zookeeper://{server.host_port}{namespace}"
            f"?username={user}&password={password}&session_timeout=4"
        ),
        connect_writer,
        lambda name: admin.exists(path(name)) is not None,
        entries,
        path,
        "/locked/child",  # the writer's client is chrooted at the namespace
    )
    try:
        yield store
    finally:
        store.close()
        for client in (*clients, admin):
            client.stop()
            client.close()


@pytest.fixture(scope="session")
def _secured_redis() -> Iterator[Any]:
    import redis

    from semaphore_recipes.devtools.redis_server import RedisServer

    with RedisServer() as server:
        admin: Any = redis.Redis(host="127.0.0.1", port=server.port)
        acl = admin.execute_command
        acl("ACL", "SETUSER", REDIS_ADMIN[0], "on", f">{REDIS_ADMIN[1]}", "~*", "&*", "+@all")
        acl("ACL", "SETUSER", WRITER[0], "on", f">{WRITER[1]}", f"~{REDIS_PATTERN}", "+@all")
        acl("ACL", "SETUSER", READER[0], "on", f">{READER[1]}", f"~{REDIS_PATTERN}",
            "resetchannels", "-@all", *REDIS_MONITOR_COMMANDS.split())  # fmt: skip
        acl("ACL", "SETUSER", "default", "off")  # (last: this connection stays the default's)
        admin.close()
        yield server


def _redis_store(server: Any) -> Iterator[SecuredStore]:
    import redis

    prefix = f"{REDIS_PATTERN[:-1]}{uuid.uuid4().hex[:10]}"
    host, port = server.host_port.rsplit(":", 1)
    admin: Any = redis.Redis(
        host=host, port=int(port), username=REDIS_ADMIN[0], password=REDIS_ADMIN[1]
    )

    def url_for(user: str, password: str) -> str:
        return f"redis://{user}:{password}@{server.host_port}/0?prefix={prefix}&session_timeout=4"

    store = SecuredStore(
        "redis",
        url_for,
        lambda: sr.connect(url_for(*WRITER)),
        lambda name: bool(admin.exists(f"{prefix}:s:{name}:cfg")),
        lambda name: int(admin.hlen(f"{prefix}:s:{name}:e")),
        lambda name: f"semaphore {name!r}",
        f"outside-{uuid.uuid4().hex[:10]}",  # the users' pattern covers REDIS_PATTERN only
    )
    try:
        yield store
    finally:
        store.close()
        admin.close()


@pytest.fixture(params=["zookeeper", "etcd", "redis"])
def secured(request: pytest.FixtureRequest) -> Iterator[SecuredStore]:
    """A namespace of the test's own on a server with restricted users."""
    if request.param == "etcd":
        yield from _etcd_store(request.getfixturevalue("_secured_etcd"))
    elif request.param == "redis":
        yield from _redis_store(request.getfixturevalue("_secured_redis"))
    else:
        yield from _zookeeper_store(
            request.getfixturevalue("zookeeper_server"),
            request.getfixturevalue("sr_namespace"),
        )


@contextlib.contextmanager
def redis_users_on_every_node(
    ports: list[int], prefix: str, rights: dict[str, str]
) -> Iterator[tuple[dict[str, str], str]]:
    """Users ``kind-<random>`` (one per ``rights`` key: ``worker``, ``monitor``) with
    those rights on ``prefix``'s keys, made on each node of ``ports`` (ACLs are per
    node) and deleted after: ({kind: user name}, their password)."""
    import redis

    suffix, password = uuid.uuid4().hex[:6], uuid.uuid4().hex
    names = {kind: f"{kind}-{suffix}" for kind in rights}
    admins: list[Any] = [redis.Redis(host="127.0.0.1", port=port) for port in ports]
    try:
        for admin in admins:
            for kind, commands in rights.items():
                admin.execute_command(
                    "ACL", "SETUSER", names[kind], "on", f">{password}", f"~{prefix}:*",
                    "resetchannels", "-@all", *commands.split(),
                )  # fmt: skip
        yield names, password
    finally:
        for admin in admins:
            admin.execute_command("ACL", "DELUSER", *names.values())
            admin.close()
