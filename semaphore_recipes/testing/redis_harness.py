"""The Redis harnesses: fault verbs on a single ``redis-server`` (and its restart), and
on a Sentinel-managed set (``redis+sentinel://``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..backend import Backend
from ..client import Client
from .faces import store_backend
from .harness import NetworkHarness, Verb

if TYPE_CHECKING:
    import redis

    from ..devtools.redis_cluster import RedisCluster
    from ..devtools.redis_server import RedisServer
    from ..redis.backend import RedisBackend

__all__ = [
    "RedisClusterHarness",
    "RedisHarness",
    "RedisSentinelHarness",
    "lease_keys",
    "live_redis_entries",
]


def live_redis_entries(
    admin: redis.Redis | redis.RedisCluster,
    prefix: str,
    name: str | None = None,
) -> list[str]:
    """``<prefix>/<semaphore>/<entry id>`` of every entry under ``prefix`` (of semaphore
    ``name``) whose lease is alive: what the scripts count. An entry of an expired lease
    is dead for every script, and removed by the next one that meets it. A live entry's
    job slots are listed too, as ``<prefix>/<semaphore>/slots/<index>`` (they live in
    the entry, and the other harnesses list their slot records with the entries).
    ``admin`` may be a Redis Cluster client (keys under ``prefix:{tag}``, read on every
    node)."""
    import json
    import re

    found = []
    semaphores = name if name is not None else "*"
    shape = re.compile(rf"^({re.escape(prefix)}(?::\{{[^}}]*\}})?):s:(.+):e$")
    for pattern in (f"{prefix}:s:{semaphores}:e", f"{prefix}:{{*}}:s:{semaphores}:e"):
        for key in admin.scan_iter(match=pattern, count=1000):
            matched = shape.match(_text(key))
            if matched is None:
                continue
            key_prefix, semaphore = matched.groups()
            for entry_id, raw in admin.hgetall(key).items():
                entry = json.loads(raw)
                if admin.exists(f"{key_prefix}:lease:{entry['l']}"):
                    found.append(f"{prefix}/{semaphore}/{_text(entry_id)}")
                    slots = entry.get("x", [])
                    found += [f"{prefix}/{semaphore}/slots/{index}" for index in slots[::2]]
    return sorted(found)


def lease_keys(admin: redis.Redis | redis.RedisCluster, prefix: str, lease: str = "*") -> list[str]:
    """The lease keys under ``prefix`` (of ``lease``): one per client, or on a cluster
    one per client and hash tag in use."""
    keys = []
    for pattern in (f"{prefix}:lease:{lease}", f"{prefix}:{{*}}:lease:{lease}"):
        keys += [_text(k) for k in admin.scan_iter(match=pattern, count=1000)]
    return keys


class RedisHarness(NetworkHarness):
    """A ``redis-server`` behind ``url``, into a key prefix of the test's own.

    ``expire_session`` deletes the backend's lease key, as its expiry would (its entries
    are dead at once; the backend learns of it at its next renewal, within a third of
    the session timeout). ``sessions`` lists the lease ids (as ints). There is no
    leader to kill (one primary). :meth:`delete_entry` removes an entry as an operator
    would (the entry's client is told).
    """

    kind = "redis"
    missing: Mapping[Verb, str] = {
        Verb.KILL_LEADER: "one redis primary, no members to elect a leader"
    }

    def __init__(
        self,
        url: str,
        make: Callable[..., Client],
        *,
        server: RedisServer,
        prefix: str,
        admin: redis.Redis | redis.RedisCluster,
    ) -> None:
        super().__init__(url, make, [server.host_port])
        self.server = server
        self.prefix = prefix
        self.admin = admin

    def connect(self, *args: Any, **kwargs: Any) -> Client:
        """As :meth:`Harness.connect`, typed for this store."""
        from ..redis.backend import RedisBackend

        backend = super().connect(*args, **kwargs)
        if not isinstance(store_backend(backend), RedisBackend):
            raise TypeError(f"the redis harness opened {backend!r}")
        return backend

    def url_with(self, **params: object) -> str:
        """The harness's URL with ``params`` as its query, beside the test's prefix."""
        return super().url_with(prefix=self.prefix, **params)

    def entries(self, name: str | None = None) -> list[str]:
        return live_redis_entries(self.admin, self.prefix, name)

    def delete_entry(self, entry: str) -> None:
        """Remove ``entry`` (as :meth:`entries` names it) with the library's own script,
        as an operator's tool would: the next entries are admitted, its client told."""
        import time

        from .._url import parse_url
        from ..backend import Deadline
        from ..redis.calls import SyncRunner, call
        from ..redis.layout import KeyLayout
        from ..redis.params import RedisParams
        from ..redis.scripts import ScriptName

        _, name, entry_id = entry.rsplit("/", 2)
        params = RedisParams.from_url(parse_url(self.url))
        runner = SyncRunner(params)
        try:
            bound = Deadline(5.0, time.monotonic)
            runner.run(
                call(
                    ScriptName.REMOVE,
                    (KeyLayout(self.prefix, params.cluster).of(name), name, entry_id, ""),
                    where="harness",
                    bound=bound,
                )
            )
        finally:
            runner.close()

    def expire_session(self, backend: Client | Backend) -> None:
        for key in lease_keys(self.admin, self.prefix, _redis(backend).lease):
            self.admin.delete(key)

    def sessions(self) -> set[int]:
        return {int(k.rsplit(":", 1)[1], 16) for k in lease_keys(self.admin, self.prefix)}

    def session_of(self, backend: Client | Backend) -> int:
        return int(_redis(backend).lease, 16)


class RedisSentinelHarness(RedisHarness):
    """A :class:`RedisHarness` whose URL names sentinels (``redis+sentinel://``);
    ``admin`` is a client of the primary they name. A backend's data connections go to
    the address the sentinels give, past any proxy of the sentinels: there is no
    ``cut`` or ``lose_next_reply`` (the failover tests kill the primary instead)."""

    kind = "redis+sentinel"
    missing: Mapping[Verb, str] = {
        Verb.KILL_LEADER: "the failover tests (tests/redis_sentinel) kill the primary",
        Verb.CUT: "the data connections go where the sentinels say, past any proxy",
        Verb.LOSE_NEXT_REPLY: "the data connections go where the sentinels say, past any proxy",
    }

    def __init__(
        self,
        url: str,
        make: Callable[..., Client],
        *,
        sentinel_set: Any,
        prefix: str,
        admin: redis.Redis,
    ) -> None:
        # (no one server: NetworkHarness's servers are the sentinels, never proxied)
        NetworkHarness.__init__(self, url, make, sentinel_set.sentinel_hosts.split(","))
        self.sentinel_set = sentinel_set
        self.prefix = prefix
        self.admin = admin

    def unreachable_url(self) -> str:
        return f"{self.kind}://127.0.0.1:9/mymaster?connect_timeout=1"


class RedisClusterHarness(RedisHarness):
    """A Redis Cluster behind ``url`` (``redis+cluster://``), into a key prefix of the
    test's own. Its clients learn the nodes' addresses from the cluster itself, so no
    proxy stands in between: no network faults here (the failover tests kill a
    primary with :class:`~semaphore_recipes.devtools.redis_cluster.RedisCluster`)."""

    kind = "redis+cluster"
    missing: Mapping[Verb, str] = {
        Verb.CUT: "cluster clients reach the nodes the cluster names, past any proxy",
        Verb.LOSE_NEXT_REPLY: "cluster clients reach the nodes the cluster names, past any proxy",
        Verb.KILL_LEADER: "a primary per slot range: tests/redis_cluster kills one",
    }

    def __init__(
        self,
        url: str,
        make: Callable[..., Client],
        *,
        cluster: RedisCluster,
        prefix: str,
        admin: redis.RedisCluster,
    ) -> None:
        super().__init__(url, make, server=cluster.nodes[0], prefix=prefix, admin=admin)
        self.cluster = cluster


def _redis(backend: Client | Backend) -> RedisBackend:
    from ..redis.backend import RedisBackend

    found = store_backend(backend)
    if not isinstance(found, RedisBackend):
        raise TypeError(f"not a redis backend: {backend!r}")
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
