"""The Starlette application the ASGI middleware test serves with uvicorn: ``/slow``
limited to 3 at once (429 after 1 s), ``/strict`` to 1 (503, ``Retry-After: 7``, after
0.3 s); ``/stats`` (not limited) tells how many handlers were inside at once. The store
is the URL in ``SR_TEST_ASGI_URL``."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from semaphore_recipes import aio
from semaphore_recipes.integrations.asgi import RouteLimit, SemaphoreMiddleware

backends: dict[str, aio.AsyncBackend] = {}
inside = {"now": 0, "most": 0, "cancelled": 0}


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with aio.connect(os.environ["SR_TEST_ASGI_URL"]) as backend:
        backends["store"] = backend
        yield


async def slow(request: Request) -> JSONResponse:
    """Holds its place for ``?seconds=`` and answers its permit's fencing token."""
    permit = request.state.semaphore_permit
    inside["now"] += 1
    inside["most"] = max(inside["most"], inside["now"])
    try:
        await asyncio.sleep(float(request.query_params.get("seconds", "0.3")))
    except asyncio.CancelledError:
        inside["cancelled"] += 1
        raise
    finally:
        inside["now"] -= 1
    return JSONResponse({"token": permit.token})


async def stats(request: Request) -> JSONResponse:
    answer = dict(inside)
    if "reset" in request.query_params:
        inside.update(most=0, cancelled=0)
    return JSONResponse(answer)


app = SemaphoreMiddleware(
    Starlette(
        routes=[Route("/slow", slow), Route("/strict", slow), Route("/stats", stats)],
        lifespan=lifespan,
    ),
    lambda: backends["store"],
    [
        RouteLimit("/slow", "slow", capacity=3, timeout=1.0),
        RouteLimit("/strict", "strict", capacity=1, timeout=0.3, status=503, retry_after=7),
    ],
)
