"""Small helpers shared by the etcd layer tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes.etcd._proto import etcd_api_pb2 as pb
from semaphore_recipes.etcd._proto import etcd_api_pb2_grpc
from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.errors import map_rpc_error
from semaphore_recipes.etcd.ops import Key, range_request
from semaphore_recipes.etcd.retry import retry_unavailable

T = TypeVar("T")

_rpc: Any = etcd_api_pb2_grpc  # generated without type hints


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "") -> None:
    """Poll ``predicate`` every 10 ms until it is truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(0.01)


def retry(fn: Callable[[], T], timeout: float = 10.0) -> T:
    """``fn()``, retried on EtcdUnavailable for up to ``timeout`` s (each attempt with
    the client's own timeout)."""
    return retry_unavailable(
        lambda _attempt_timeout: fn(),
        Deadline(timeout, time.monotonic),
        attempt_timeout=timeout,
        initial_backoff=0.02,
        max_backoff=0.5,
    )


def _raw_call(client: EtcdClient, service: str, method: str, request: Any) -> Any:
    """An RPC the library never makes, on the client's channel (errors mapped as the
    layer maps its own)."""
    stub = getattr(_rpc, f"{service}Stub")(client.channel)
    try:
        return getattr(stub, method)(request, timeout=5.0, metadata=client.metadata())
    except grpc.RpcError as exc:
        raise map_rpc_error(exc) from exc


def member_status(client: EtcdClient) -> Any:
    """etcd's Status of the member the client's channel is connected to."""
    return _raw_call(client, "Maintenance", "Status", pb.StatusRequest())


def compact(client: EtcdClient, revision: int) -> None:
    """Compact the store's history up to ``revision``."""
    _raw_call(client, "KV", "Compact", pb.CompactionRequest(revision=revision))


def serializable_range(client: EtcdClient, key: Key, range_end: Key) -> Any:
    """A range the member answers from its own store, without a quorum round."""
    request = range_request(key, range_end)
    request.serializable = True
    return _raw_call(client, "KV", "Range", request)


def busy_loop_for(
    seconds: float, on_each: Callable[[], object] | None = None, step: float = 0.002
) -> asyncio.Future[None]:
    """Keep the running loop busy for ``seconds``: a storm of CPU-bound callbacks, all
    ready at once, so that no timer, I/O reply or task of the loop runs before the last
    (a loop runs every callback ready at the start of an iteration before it polls).
    ``on_each`` is called at each callback's end. Await the result to wait for the end."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def burn() -> None:
        end = time.monotonic() + step
        while time.monotonic() < end:
            pass
        if on_each is not None:
            on_each()

    for _ in range(int(seconds / step)):
        loop.call_soon(burn)
    loop.call_soon(done.set_result, None)
    return done
