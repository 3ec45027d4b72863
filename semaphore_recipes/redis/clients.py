"""The redis-py clients of the runners: one server (``redis://``), the primary that
Redis Sentinel names (``redis+sentinel://``), or a Redis Cluster (``redis+cluster://``:
redis-py's ``RedisCluster``, which maps the slots when made and again after a node
fails or a slot moves), for each face.

Through Sentinel, every new connection asks the sentinels (in turn) for the current
primary of the service, so a failover is followed at the next connect: a connection to
a primary that was killed fails (a connection error), and one to a primary demoted to a
replica is closed by redis-py on its first ``READONLY`` reply and raised as a
connection error; while no sentinel names a primary, connecting raises
``MasterNotFoundError`` (a connection error too). The runners' retry policy
(:func:`.calls.call`) treats all of them as transient: a call is sent again within its
bound, then becomes BackendUnavailable. redis-py's own retries are off on the data
connections and on the sentinels' (``retry``, from the caller).

redis-py's blocking Sentinel connection (8.1) keeps a connection whose read was
interrupted (Ctrl-C), unlike ``redis.Connection``: the next command on it would read the
interrupted one's reply. Ours closes it, as ``redis.Connection`` does.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from .params import RedisParams

__all__ = ["async_client", "close_async", "close_sync", "sync_client"]


class _ClosedOnFailedRead:
    """A read that raises anything (an interrupt too) closes the connection."""

    def read_response(self, *args: Any, disconnect_on_error: bool = True, **kwargs: Any) -> Any:
        read: Any = super().read_response  # type: ignore[misc]  # (the connection's)
        return read(*args, disconnect_on_error=disconnect_on_error, **kwargs)


class _SentinelConnection(_ClosedOnFailedRead, redis.sentinel.SentinelManagedConnection):  # type: ignore[misc]
    pass


class _SentinelSSLConnection(_ClosedOnFailedRead, redis.sentinel.SentinelManagedSSLConnection):  # type: ignore[misc]
    pass


def sync_client(params: RedisParams, retry: Any) -> Any:
    """A blocking client of the server, of the service's primary through Sentinel, or
    of the cluster (an unreachable cluster: a connection error, as for the others)."""
    if params.cluster:
        try:
            return redis.RedisCluster(**params.cluster_options(), retry=retry)
        except redis.exceptions.RedisClusterException as exc:
            raise redis.exceptions.ConnectionError(str(exc)) from exc
    if not params.sentinels:
        return redis.Redis(**params.client_options(), retry=retry)  # type: ignore[arg-type]
    sentinel_type: Any = redis.sentinel.Sentinel  # (redis-py's Sentinel is untyped)
    sentinel = sentinel_type(
        list(params.sentinels), sentinel_kwargs=params.sentinel_options(retry=retry)
    )
    connection_class = _SentinelSSLConnection if params.tls else _SentinelConnection
    client: redis.Redis = sentinel.master_for(
        params.service,
        **params.client_options(),
        retry=retry,
        connection_class=connection_class,
    )
    return client


def async_client(params: RedisParams, retry: Any) -> Any:
    """An asyncio client of the server, of the service's primary through Sentinel, or
    of the cluster (it maps the slots at its first call)."""
    if params.cluster:
        return redis.asyncio.RedisCluster(**params.cluster_options(asyncio=True), retry=retry)
    if not params.sentinels:
        return redis.asyncio.Redis(**params.client_options(), retry=retry)  # type: ignore[arg-type]
    sentinel_type: Any = redis.asyncio.sentinel.Sentinel  # (as above)
    sentinel = sentinel_type(
        list(params.sentinels), sentinel_kwargs=params.sentinel_options(retry=retry)
    )
    client: redis.asyncio.Redis = sentinel.master_for(
        params.service, **params.client_options(), retry=retry
    )
    return client


def close_sync(client: Any) -> None:
    """Close ``client``'s connections, and the sentinels' it asked (if any)."""
    if isinstance(client, redis.RedisCluster):
        client.close()
        return
    pool = client.connection_pool
    client.close()
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        for sentinel in pool.sentinel_manager.sentinels:
            sentinel.close()


async def close_async(client: Any) -> None:
    """Close ``client``'s connections, and the sentinels' it asked (if any)."""
    if isinstance(client, redis.asyncio.RedisCluster):
        await client.aclose()
        return
    pool = client.connection_pool
    await client.aclose()
    if isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool):
        for sentinel in pool.sentinel_manager.sentinels:
            await sentinel.aclose()
