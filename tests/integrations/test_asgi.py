"""The ASGI middleware under a real uvicorn process, on the test Redis server: at most N
handlers inside, the others answered 429/503 with ``Retry-After`` at the end of their
wait, and nothing left in the store when clients hang up mid-request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import semaphore_recipes as sr
from semaphore_recipes.devtools.processes import free_port
from semaphore_recipes.testing.polling import wait_until

from .processes import spawn, stop


@pytest.fixture
def asgi_server(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """uvicorn serving tests/integrations/asgi_app.py on a free port: its base URL."""
    port = free_port()
    log_path = tmp_path / "uvicorn.log"
    server = spawn(
        [
            *("uvicorn", "tests.integrations.asgi_app:app", "--host", "127.0.0.1"),
            *("--port", str(port), "--log-level", "warning", "--timeout-graceful-shutdown", "2"),
        ],
        log_path,
        {"SR_TEST_ASGI_URL": redis_url},
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert server.poll() is None, log_path.read_text()
        try:
            return httpx.get(f"{base}/stats", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(up, timeout=20, interval=0.1)
        yield base
    finally:
        stop([server])


def _no_one_in(sem: sr.Semaphore) -> bool:
    status = sem.status()
    return not status.holders and not status.waiters


Timed = tuple[httpx.Response, float]


async def _get_all(base: str, paths: list[tuple[float, str]]) -> list[Timed]:
    """GET each ``(delay, path)`` concurrently, each after its delay: (response, seconds)."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:

        async def one(delay: float, path: str) -> Timed:
            await asyncio.sleep(delay)
            started = time.monotonic()
            response = await client.get(path)
            return response, time.monotonic() - started

        return await asyncio.gather(*(one(delay, path) for delay, path in paths))


def test_at_most_n_inside_the_rest_answered_at_the_end_of_their_wait(
    asgi_server: str, redis_backend: Callable[..., Any]
) -> None:
    results = asyncio.run(_get_all(asgi_server, [(0, "/slow?seconds=0.4")] * 15))
    stats = httpx.get(f"{asgi_server}/stats?reset").json()
    granted = [(r, t) for r, t in results if r.status_code == 200]
    rejected = [(r, t) for r, t in results if r.status_code != 200]
    print(
        "/slow: most inside",
        stats["most"],
        "granted",
        len(granted),
        "rejected in",
        sorted(round(t, 3) for _, t in rejected),
    )
    assert stats["most"] == 3  # the bound, reached
    assert len(granted) >= 6 and len(rejected) >= 3
    assert len({r.json()["token"] for r, _ in granted}) == len(granted)
    for response, seconds in rejected:
        assert response.status_code == 429
        assert response.headers["retry-after"] == "1"
        assert 0.9 <= seconds <= 2.0  # the route's wait (1 s), then answered at once

    # the 503 route: one holds its only permit 1.5 s; one more is answered within 0.3 s
    strict = asyncio.run(
        _get_all(asgi_server, [(0, "/strict?seconds=1.5"), (0.3, "/strict?seconds=0")])
    )
    (held, _), (busy, seconds) = strict
    print("/strict: 503 answered in", round(seconds, 3))
    assert held.status_code == 200
    assert (busy.status_code, busy.headers["retry-after"]) == (503, "7")
    assert 0.25 <= seconds <= 1.3

    backend = redis_backend()
    wait_until(lambda: _no_one_in(backend.semaphore("slow", 3)), timeout=5)
    wait_until(lambda: _no_one_in(backend.semaphore("strict", 1)), timeout=5)


async def _hang_up_midway(base: str, count: int, ready: Callable[[], bool]) -> None:
    """``count`` raw HTTP/1.1 requests for a 30 s handler, all closed once ``ready()``."""
    host, port = base.removeprefix("http://").split(":")
    connections = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /slow?seconds=30 HTTP/1.1\r\nHost: test\r\n\r\n")
        await writer.drain()
        connections.append((reader, writer))
    deadline = time.monotonic() + 10
    while not await asyncio.to_thread(ready):
        assert time.monotonic() < deadline, "the requests did not all arrive"
        await asyncio.sleep(0.05)
    for _, writer in connections:
        writer.close()


def test_clients_that_hang_up_leave_no_permit_and_no_waiter(
    asgi_server: str, redis_backend: Callable[..., Any]
) -> None:
    sem = redis_backend().semaphore("slow", 3)

    def three_inside_three_waiting() -> bool:
        status = sem.status()
        return len(status.holders) == 3 and len(status.waiters) == 3

    asyncio.run(_hang_up_midway(asgi_server, 6, three_inside_three_waiting))
    started = time.monotonic()
    wait_until(lambda: _no_one_in(sem), timeout=5)
    print("hung up: store empty after", round(time.monotonic() - started, 3), "s")
    stats = httpx.get(f"{asgi_server}/stats").json()
    assert (stats["now"], stats["cancelled"]) == (0, 3)  # the handlers were cancelled
