"""How the requests a ZooKeeper program yields are answered: blocking or awaited.

Each step of the ZooKeeper backend is written once, as a program
(``semaphore_recipes._core.program``) that yields what it waits for:

- a :class:`Within` first: the bound of the requests that follow (a protocol step's is
  the acquire's deadline, a call's the request timeout, a delete's the request timeout
  and then the background), what to raise when it passes, and the path an ACL refusal
  names. The program carries its own bound, so one runner answers every program
  (``ZooKeeperBackend.run``/``run_async``); a program run inside another (a fallback
  delete per queue) bounds what follows with its own;
- a kazoo ``IAsyncResult`` (a request in flight): answered with ``result.get()``'s value,
  or its exception thrown in;
- :data:`Await.CONNECTION`: the backend's client is connected (again);
- a :class:`Pause`: some time passes (a retry's back-off).

:class:`Answering` answers one run's requests, with the same exception mapping for both
faces: :meth:`Answering.wait` blocks (the sync face), :meth:`Answering.wait_async` is
awaited from the event loop, woken by kazoo's callback thread through
``loop.call_soon_threadsafe`` (no thread, no executor per request). When the bound
passes, its ``timed_out()`` is raised; kazoo's ConnectionClosedError becomes
BackendUnavailable (or KeyboardInterrupt, when it hid one), NoAuthError PermissionDenied
naming the bound's ``path``, and any other failure of kazoo itself BackendUnavailable.
A KeyboardInterrupt that kazoo swallowed while queueing one of the program's requests
(noted as it happens, see ``_kazoo_compat.note_swallowed_interrupts``) is raised at
the program's next yield, whatever that request's result says by then.
ZooKeeper's own errors (ConnectionLoss, SessionExpiredError, NoNodeError...) reach the
program as they are: what to do about them is the step's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kazoo.exceptions import ConnectionClosedError, KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError

from .._core.deadline import Deadline
from ..errors import BackendUnavailable, SemaphoreError
from . import _kazoo_compat

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

__all__ = ["Answering", "Await", "NoReplyInTime", "Pause", "Within", "ZkProgram", "reply_async"]

T = TypeVar("T")
#: A ZooKeeper program: what it yields is answered by :class:`Answering`; the replies
#: are kazoo's values (typed Any, as kazoo is untyped).
ZkProgram = Generator[object, Any, T]


class NoReplyInTime(Exception):
    """:func:`reply_async` waited its whole timeout."""


class Await(enum.Enum):
    """What a program may wait for besides a reply."""

    CONNECTION = "connection"  #: the client is connected (within the bound)
    #: let the event loop run the other ready tasks once (the sync face: nothing)
    TURN = "turn"


@dataclass(frozen=True)
class Pause:
    """Let ``seconds`` pass (a retry's back-off)."""

    seconds: float


@dataclass(frozen=True)
class Within:
    """Yielded by a program before its first request: answer the requests that follow
    within ``deadline``, then raise ``timed_out()``; an ACL refusal names ``path``."""

    deadline: Deadline
    timed_out: Callable[[], Exception]
    path: str


class Answering:
    """Answers one run of a ZooKeeper program, each request within the last
    :class:`Within` it yielded (see the module): the runner's two halves."""

    __slots__ = ("_backend", "_within")

    def __init__(self, backend: ZooKeeperBackend) -> None:
        self._backend = backend
        self._within: Within | None = None

    def _bound(self) -> Within:
        within = self._within
        if within is None:
            raise TypeError("a ZooKeeper program yields Within(...) before its first request")
        return within

    # ---- blocking ------------------------------------------------------------
    def wait(self, request: object) -> object:
        if type(request) is Within:
            self._within = request
            return None
        self._give_back_swallowed_interrupt()
        within = self._bound()
        if request is Await.CONNECTION:
            self._backend.wait_connected(within.deadline)
            return None
        if request is Await.TURN:
            return None
        if isinstance(request, Pause):
            time.sleep(request.seconds)
            return None
        deadline = within.deadline
        while True:
            try:
                return request.get(block=True, timeout=deadline.remaining())  # type: ignore[attr-defined]
            except KazooTimeoutError:
                # kazoo gives up when its one wait returns without a value, which
                # may be a moment before our clock says the deadline passed
                if deadline.expired():
                    break
            except Exception as exc:
                raise self._mapped(exc, within) from exc
        raise within.timed_out()

    # ---- awaited -------------------------------------------------------------
    async def wait_async(self, request: object) -> object:
        if type(request) is Within:
            self._within = request
            return None
        self._give_back_swallowed_interrupt()
        within = self._bound()
        if request is Await.CONNECTION:
            await self._backend.wait_connected_async(within.deadline)
            return None
        if request is Await.TURN:
            await asyncio.sleep(0)
            return None
        if isinstance(request, Pause):
            await asyncio.sleep(request.seconds)
            return None
        try:
            return await reply_async(request, within.deadline.remaining())
        except NoReplyInTime:
            raise within.timed_out() from None
        except Exception as exc:
            raise self._mapped(exc, within) from exc

    # ---- both ----------------------------------------------------------------
    def _give_back_swallowed_interrupt(self) -> None:
        if _kazoo_compat.take_swallowed_interrupt(self._backend.client):
            # kazoo swallowed it queueing a request this program made; that request's
            # result may hold its reply by now. The cleanup finds any entry by its id.
            raise KeyboardInterrupt("interrupted while kazoo was sending a request")

    def _mapped(self, exc: Exception, within: Within) -> BaseException:
        if isinstance(exc, ConnectionClosedError):
            client = self._backend.client
            if _kazoo_compat.interrupted_request(exc, client):
                # kazoo swallowed a KeyboardInterrupt (the request may still be sent):
                # give the caller its interrupt back; the cleanup finds any entry by its id
                _kazoo_compat.wake_connection_thread(client)  # else requests lag behind
                return KeyboardInterrupt("interrupted while kazoo was sending a request")
            return BackendUnavailable("the ZooKeeper client was closed")
        if isinstance(exc, NoAuthError):
            return self._backend.permission_denied(within.path, exc)
        if isinstance(exc, (KazooException, SemaphoreError)):
            return exc
        # kazoo's own failure, e.g. its connection loop dying
        return BackendUnavailable(f"the ZooKeeper client failed: {exc!r}")


async def reply_async(result: Any, timeout: float | None) -> Any:
    """The value of the kazoo request ``result``, awaited: kazoo's callback thread sets
    it on a future of the running loop. NoReplyInTime after ``timeout`` seconds (None:
    no bound); the exception of the request raised as it is. Cancelling the awaiting
    task does not cancel the request (ZooKeeper has no such thing)."""
    if result.ready():
        return result.get(block=False)
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[Any] = loop.create_future()

    def arrived(done: Any) -> None:  # on kazoo's callback thread
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it any more
            loop.call_soon_threadsafe(_settle, reply, done)

    result.rawlink(arrived)
    timer = None if timeout is None else loop.call_later(timeout, _expire, reply)
    try:
        return await reply
    finally:
        if timer is not None:
            timer.cancel()


def _settle(reply: asyncio.Future[Any], result: Any) -> None:
    if reply.done():
        return  # timed out, or the task was cancelled
    try:
        reply.set_result(result.get(block=False))
    except Exception as exc:
        reply.set_exception(exc)


def _expire(reply: asyncio.Future[Any]) -> None:
    if not reply.done():
        reply.set_exception(NoReplyInTime())
