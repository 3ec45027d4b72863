"""Store programs: a backend's step written once, run by the sync or the async face.

A *program* is a generator that yields what it waits for (a backend's own kind of
pending request: a kazoo async result, an etcd RPC to make, "the connection is back")
and receives the reply, or has the request's exception thrown in at the ``yield``.
:func:`run_program` answers with a blocking ``wait``; :func:`run_program_async` with an
awaited one. The step's logic (retries, lost replies, what to read next) then exists
once per backend, whichever face drives it, as the acquire protocol does in
:mod:`._core.protocol`.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
# (typing's Generator, not collections.abc's: its alias takes a docstring)
Program = typing.Generator[object, object, T]
Program.__doc__ = """A store program answering ``T``: a generator that yields the requests it
waits for and receives each reply (or has its exception thrown in)."""

__all__ = ["Program", "run_program", "run_program_async"]


def run_program(program: Program[T], wait: Callable[[object], object]) -> T:
    """Run ``program`` to its return value, answering each yielded request with
    ``wait(request)`` (blocking). An exception ``wait`` raises is thrown into the
    program at its ``yield``; one the program does not catch ends it and propagates."""
    reply: object = None
    error: BaseException | None = None
    try:
        while True:
            try:
                pending = program.send(reply) if error is None else program.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            finally:
                error = None
            try:
                reply = wait(pending)
            except BaseException as exc:  # thrown in: the program's own handlers decide
                reply, error = None, exc
    except BaseException:
        program.close()  # an interrupt landed outside wait(): the cleanup still runs
        raise


async def run_program_async(program: Program[T], wait: Callable[[object], Awaitable[object]]) -> T:
    """:func:`run_program`, with an awaited ``wait``: a cancellation of the awaiting
    task is thrown into the program like any other exception (``CancelledError`` is a
    BaseException, so ``except Exception`` handlers in the program let it through)."""
    reply: object = None
    error: BaseException | None = None
    try:
        while True:
            try:
                pending = program.send(reply) if error is None else program.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            finally:
                error = None
            try:
                reply = await wait(pending)
            except BaseException as exc:
                reply, error = None, exc
    except BaseException:
        program.close()
        raise
