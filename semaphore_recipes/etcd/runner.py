"""Running the etcd backend's programs: blocking on the sync client, awaited on the aio one.

Each step of the backend and its queues (the capacity agreement, the enqueue, arm,
relist, status, the deletes, the fenced commit, the lease grant) is written once as a
program (``_core.program``) that yields :class:`~.rpc.Call`, :class:`~.rpc.Pause`,
:class:`~.rpc.UndoCreate` and :class:`~.rpc.AwaitCreated` values, and
:class:`~.turns.AwaitTurn` (waiting for another caller's lease grant or shared read).
This module is the only place that decides blocking or awaited: :class:`SyncRunner`
answers them on :class:`~.client.EtcdClient` in the calling thread and runs background
programs (held marks, delete retries) on a small thread pool; :class:`AsyncRunner`
awaits them on :class:`~.aio_client.AioEtcdClient` and runs background programs as tasks
of the event loop: no thread per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .._core.program import Program, run_program, run_program_async
from .._interrupts import call_with_sigint_held
from .aio_client import AioEtcdClient
from .client import EtcdClient
from .rpc import AwaitCreated, Call, Pause, UndoCreate
from .turns import AwaitTurn
from .watch import Watcher

__all__ = ["AsyncRunner", "SyncRunner"]

log = logging.getLogger("semaphore_recipes.etcd")
T = TypeVar("T")


class SyncRunner:
    """Programs answered blocking, on the calling thread. On the main thread Ctrl-C is
    held until each call returns, so a KeyboardInterrupt never lands inside grpc's code
    (``_interrupts``) and an interrupted create is over before its undo is sent."""

    def __init__(
        self, client: EtcdClient, seen: Callable[[object], None] = lambda reply: None
    ) -> None:
        self.client = client
        self._seen = seen  # told every reply (the backend reads its header)
        # fire-and-forget programs (held marks, deletes that must be retried)
        self.background = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sr-etcd")

    def answer(self, request: object) -> object:
        if isinstance(request, Call):
            reply = call_with_sigint_held(lambda: self.client.execute(request))
            self._seen(reply)
            return reply
        if isinstance(request, Pause):
            time.sleep(request.seconds)
            return None
        if isinstance(request, AwaitTurn):
            request.turns.wait(request)
            return None
        if isinstance(request, UndoCreate):
            return self.run(request.undo)  # the create is over: its call has returned
        if isinstance(request, AwaitCreated):
            end = time.monotonic() + request.timeout
            for watcher in request.watchers:
                if not watcher.created.wait(max(0.0, end - time.monotonic())):
                    break
            return None
        raise TypeError(f"not an etcd request: {request!r}")

    def run(self, program: Program[T]) -> T:
        return run_program(program, self.answer)

    def spawn(self, program: Program[None]) -> None:
        """Run ``program`` on a pool thread, not waiting for it (dropped once closed:
        revoking the lease removes the entries)."""
        with contextlib.suppress(RuntimeError):
            self.background.submit(self._run_logged, program)

    def _run_logged(self, program: Program[None]) -> None:
        try:
            self.run(program)
        except Exception:
            log.exception("etcd: a background request failed")

    def close(self) -> None:
        """Queued background programs are dropped; a running one ends after its attempt."""
        self.background.shutdown(wait=False, cancel_futures=True)


class AsyncRunner:
    """Programs answered awaited, in the event loop; background programs as its tasks."""

    def __init__(
        self, client: AioEtcdClient, seen: Callable[[object], None] = lambda reply: None
    ) -> None:
        self.client = client
        self._seen = seen  # told every reply (the backend reads its header)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    async def answer(self, request: object) -> object:
        if isinstance(request, Call):
            reply = await self.client.execute(request)
            self._seen(reply)
            return reply
        if isinstance(request, Pause):
            await asyncio.sleep(request.seconds)
            return None
        if isinstance(request, AwaitTurn):
            await request.turns.wait_async(request)
            return None
        if isinstance(request, UndoCreate):
            # a task: a cancel of the awaiting one does not end the undo
            undo = self.undo_create(request.entry, request.undo)
            if undo is not None:
                await asyncio.wait({undo}, timeout=request.timeout)
            return None
        if isinstance(request, AwaitCreated):
            await _all_created(request.watchers, request.timeout)
            return None
        raise TypeError(f"not an etcd request: {request!r}")

    async def run(self, program: Program[T]) -> T:
        return await run_program_async(program, self.answer)

    def spawn(self, program: Program[None]) -> None:
        """Run ``program`` as a task of the loop, not waiting for it."""
        self.spawn_task(self.run(program))

    def undo_create(self, entry: str, undo: Program[None]) -> asyncio.Task[None] | None:
        """Run ``undo`` as a task once the call that may create ``entry`` (a cancelled
        acquire's, if one is still on its way) has its outcome: gRPC does not order
        calls, so the delete must not overtake it. The task, or None once closed."""

        async def after_the_create() -> None:
            await self.client.settled(entry)
            await self.run(undo)

        return self.spawn_task(after_the_create())

    def spawn_task(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        """Run ``coroutine`` as a task, kept until it ends; its failure is logged. None
        once closed (nothing is run: revoking the lease removes the entries)."""
        if self._closed:
            coroutine.close()
            return None
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("etcd: a background request failed", exc_info=task.exception())

    async def close(self) -> None:
        """Background tasks are cancelled (revoking the lease removes the entries)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)


async def _all_created(watchers: tuple[Watcher, ...], timeout: float) -> None:
    """Return once every watch of ``watchers`` is confirmed, or after ``timeout``."""
    if not watchers:
        return
    loop = asyncio.get_running_loop()
    confirmed = loop.create_future()
    waiting = len(watchers)

    def one_more() -> None:  # on the loop
        nonlocal waiting
        waiting -= 1
        if waiting == 0 and not confirmed.done():
            confirmed.set_result(None)

    def told() -> None:  # on the stream's reader (the loop, unless it is the sync hub's)
        if not loop.is_closed():
            loop.call_soon_threadsafe(one_more)

    for watcher in watchers:
        watcher.when_created(told)
    # (not wait_for: on Python 3.11 it can swallow a cancel that comes as the future
    # completes, and the acquire would go on waiting)
    await asyncio.wait({confirmed}, timeout=timeout)
