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

    from ..devtools.redis_server import RedisServer
    from ..redis.backend import RedisBackend

__all__ = ["RedisHarness", "RedisSentinelHarness", "live_redis_entries"]


def live_redis_entries(admin: redis.Redis, prefix: str, name: str | None = None) -> list[str]:
    """``<prefix>/<semaphore>/<entry id>`` of every entry under ``prefix`` (of semaphore
    ``name``) whose lease is alive: what the scripts count. An entry of an expired lease
    is dead for every script, and removed by the next one that meets it."""
    import json

    found = []
    pattern = f"{prefix}:s:{name if name is not None else '*'}:e"
    for key in admin.scan_iter(match=pattern, count=1000):
        semaphore = _text(key)[len(prefix) + 3 : -2]
        for entry_id, raw in admin.hgetall(key).items():
            lease = json.loads(raw)["l"]
            if admin.exists(f"{prefix}:lease:{lease}"):
                found.append(f"{prefix}/{semaphore}/{_text(entry_id)}")
    return sorted(found)


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
        admin: redis.Redis,
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
        from ..redis.params import RedisParams
        from ..redis.scripts import ScriptName

        _, name, entry_id = entry.rsplit("/", 2)
        runner = SyncRunner(RedisParams.from_url(parse_url(self.url)))
        try:
            bound = Deadline(5.0, time.monotonic)
            runner.run(
                call(
                    ScriptName.REMOVE,
                    (self.prefix, name, entry_id, ""),
                    where="harness",
                    bound=bound,
                )
            )
        finally:
            runner.close()

    def expire_session(self, backend: Client | Backend) -> None:
        self.admin.delete(f"{self.prefix}:lease:{_redis(backend).lease}")

    def sessions(self) -> set[int]:
        keys = self.admin.scan_iter(match=f"{self.prefix}:lease:*", count=1000)
        return {int(_text(k).rsplit(":", 1)[1], 16) for k in keys}

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


def _redis(backend: Client | Backend) -> RedisBackend:
    from ..redis.backend import RedisBackend

    found = store_backend(backend)
    if not isinstance(found, RedisBackend):
        raise TypeError(f"not a redis backend: {backend!r}")
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
