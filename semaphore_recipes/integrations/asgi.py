"""ASGI middleware: a distributed concurrency limit per path pattern, for any ASGI 3 app.

:class:`SemaphoreMiddleware` wraps an application (Starlette, FastAPI, Quart, Django's
ASGI handler, a bare ASGI callable; nothing is imported from any framework). An HTTP
request whose method and path match a :class:`RouteLimit` (the first that matches)
runs its handler only while holding ``permits`` of that route's semaphore (the asyncio
face); other requests, websockets and the lifespan pass through untouched.

* **Not granted within the route's ``timeout``**: the request is answered at once
  with ``429`` (or the configured ``503``) and ``Retry-After``, the handler never runs.
  A store that cannot be reached (BackendUnavailable) is answered ``503``.
* **Granted**: the permit is in the request's state, ``scope["state"]["semaphore_permit"]``
  (Starlette: ``request.state.semaphore_permit``; its ``token`` is the fencing token).
* **Released** when the response's last body message has been sent, or when the
  handler ends without one (an exception, a cancellation). Work the application does
  after its response (Starlette's background tasks) is not covered.
* **The client goes away** (``http.disconnect`` before the response is complete):
  while waiting, the acquire is cancelled (its entry leaves the queue, the requests
  behind move up); while the handler runs, the handler's task is cancelled (with
  ``cancel_on_disconnect``, the default) and the permit released once it has ended.
  With ``cancel_on_disconnect=False`` the handler runs to its end, holding the permit.

To see a disconnect while the application is not reading, the middleware reads the
request's messages itself, from the start, and hands them to the application in order:
the body of a limited request is read ahead into memory while it waits.
Connection loss to the store while the handler runs is the permit's business
(``permit.lost``), not the middleware's: the handler is not interrupted.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from .._core.deadline import validate_timeout
from .._core.names import validate_capacity, validate_name, validate_permits
from ..aio import AsyncBackend, AsyncPermit, AsyncSemaphore
from ..errors import AcquireTimeout, BackendUnavailable

__all__ = ["PERMIT_STATE_KEY", "RouteLimit", "SemaphoreMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: the key of the permit in ``scope["state"]`` (Starlette's ``request.state``)
PERMIT_STATE_KEY = "semaphore_permit"

_DISCONNECT: Message = {"type": "http.disconnect"}


@dataclass(frozen=True)
class RouteLimit:
    """A limit on the requests whose path matches ``path`` (a regular expression, matched
    against the whole of ``scope["path"]``) and, if given, whose method is in
    ``methods``: at most ``capacity`` permits of semaphore ``semaphore`` held at once
    (across every process using it), ``permits`` per request, each request waiting at
    most ``timeout`` seconds. Rejected requests get ``status`` (429 or 503) and
    ``Retry-After: retry_after`` (default: the timeout, rounded up, at least 1).
    Checked when made: ValueError/TypeError/InvalidName, before any I/O."""

    path: str
    semaphore: str
    capacity: int
    permits: int = 1
    timeout: float = 5.0
    methods: frozenset[str] | None = None
    status: int = 429
    retry_after: int | None = None
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate_name(self.semaphore)
        validate_capacity(self.capacity)
        validate_permits(self.permits, self.capacity)
        if validate_timeout(self.timeout) is None:
            raise TypeError("a route's timeout is a number of seconds, not None")
        if self.status not in (429, 503):
            raise ValueError(f"status is 429 or 503, not {self.status!r}")
        if self.retry_after is not None and (
            isinstance(self.retry_after, bool)
            or not isinstance(self.retry_after, int)
            or self.retry_after < 0
        ):
            raise ValueError(
                f"retry_after is a whole number of seconds >= 0, not {self.retry_after!r}"
            )
        if self.methods is not None:
            object.__setattr__(self, "methods", frozenset(m.upper() for m in self.methods))
        object.__setattr__(self, "_pattern", re.compile(self.path))

    def matches(self, method: str, path: str) -> bool:
        """Does a request of ``method`` on ``path`` fall under this limit?"""
        if self.methods is not None and method.upper() not in self.methods:
            return False
        return self._pattern.fullmatch(path) is not None

    @property
    def retry_after_seconds(self) -> int:
        """The ``Retry-After`` of a rejected request."""
        if self.retry_after is not None:
            return self.retry_after
        return max(1, math.ceil(self.timeout))


class SemaphoreMiddleware:
    """Wraps ``app``: the requests matching ``limits`` run under a permit (see the module
    docstring). ``backend`` is an :class:`~semaphore_recipes.aio.AsyncBackend`, or a
    function returning one (called on each limited request: a backend connected in the
    application's lifespan, after the middleware was made)."""

    def __init__(
        self,
        app: ASGIApp,
        backend: AsyncBackend | Callable[[], AsyncBackend],
        limits: Iterable[RouteLimit],
        *,
        cancel_on_disconnect: bool = True,
    ) -> None:
        self.app = app
        self.limits = tuple(limits)
        for limit in self.limits:
            if not isinstance(limit, RouteLimit):
                raise TypeError(f"limits are RouteLimit, not {type(limit).__name__}")
        self._backend = backend
        self.cancel_on_disconnect = cancel_on_disconnect
        # each limit's semaphore, made (without I/O) on the backend of its first use
        self._semaphores: dict[RouteLimit, tuple[AsyncBackend, AsyncSemaphore]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = next(
            (lim for lim in self.limits if lim.matches(scope["method"], scope["path"])), None
        )
        if limit is None:
            await self.app(scope, receive, send)
            return
        request = _Request(receive)
        try:
            await self._limited(limit, scope, request, send)
        finally:
            await request.close()

    def semaphore(self, limit: RouteLimit) -> AsyncSemaphore:
        """The semaphore of ``limit`` on the current backend (made without I/O)."""
        backend = self._backend if isinstance(self._backend, AsyncBackend) else self._backend()
        made = self._semaphores.get(limit)
        if made is None or made[0] is not backend:
            made = (backend, backend.semaphore(limit.semaphore, limit.capacity))
            self._semaphores[limit] = made
        return made[1]

    async def _limited(
        self, limit: RouteLimit, scope: Scope, request: _Request, send: Send
    ) -> None:
        try:
            permit = await request.unless_gone(
                self.semaphore(limit).acquire(limit.permits, timeout=limit.timeout)
            )
        except AcquireTimeout:
            await _reject(send, limit.status, limit.retry_after_seconds, b"busy: try again")
            return
        except BackendUnavailable:
            await _reject(send, 503, limit.retry_after_seconds, b"the limit cannot be checked")
            return
        if permit is None:
            return  # the client went away while waiting: nobody to answer
        try:
            await self._handle(scope, request, send, permit)
        finally:
            await permit.release()

    async def _handle(
        self, scope: Scope, request: _Request, send: Send, permit: AsyncPermit
    ) -> None:
        """Run the application holding ``permit``; release it after the last body."""

        async def sending(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                request.responded = True
                await permit.release()  # the response is out: the permit goes now

        state = {**scope.get("state", {}), PERMIT_STATE_KEY: permit}
        handler = asyncio.ensure_future(
            self.app({**scope, "state": state}, request.receive, sending)
        )
        try:
            if self.cancel_on_disconnect:
                await request.unless_gone(asyncio.shield(handler))
            else:
                await asyncio.shield(handler)
        finally:
            if not handler.done():  # the client went away, or this task was cancelled
                handler.cancel()
                await asyncio.gather(handler, return_exceptions=True)


class _Request:
    """The request's incoming messages, read ahead from the server's ``receive`` by a
    task of its own so that a disconnect is seen while nobody else reads; the
    application reads them in order from :meth:`receive`."""

    def __init__(self, receive: Receive) -> None:
        self._server_receive = receive
        self._messages: asyncio.Queue[Message] = asyncio.Queue()
        self.gone = asyncio.Event()  #: the client disconnected before the response was out
        self.responded = False  #: the response's last body message was sent
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        message: Message = {}
        while message.get("type") != "http.disconnect":
            try:
                message = await self._server_receive()
            except Exception:  # the server's receive broke: the request is over for all
                message = dict(_DISCONNECT)
            await self._messages.put(message)
        if not self.responded:
            self.gone.set()

    async def receive(self) -> Message:
        """The next message, as the server's ``receive`` gives it; after a disconnect,
        a disconnect again (as servers do)."""
        if self._reader.done() and self._messages.empty():
            return dict(_DISCONNECT)
        return await self._messages.get()

    async def unless_gone(self, work: Awaitable[Any]) -> Any:
        """``await work``, unless the client goes away first: then ``work`` is cancelled
        (a permit it got meanwhile released) and None returned."""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(self.gone.wait())
        try:
            await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not task.done():  # the client went away, or this task was cancelled
                task.cancel()
                outcome = (await asyncio.gather(task, return_exceptions=True))[0]
                if isinstance(outcome, AsyncPermit):  # granted just as it was cancelled
                    await outcome.release()
        if task.cancelled() and self.gone.is_set():
            return None
        return task.result()

    async def close(self) -> None:
        """Stop reading (the request is over)."""
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


async def _reject(send: Send, status: int, retry_after: int, body: bytes) -> None:
    """Answer ``status`` with ``Retry-After`` (the handler never ran)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(retry_after).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
