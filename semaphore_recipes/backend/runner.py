"""The runner contract: how a backend runs its store programs, blocking and awaited.

Every store step (an enqueue, an arm, a status read, a fenced commit, a removal...) is
written once, as a *program* (``_core.program``): a generator that yields the store
requests it waits for and returns the step's answer. A backend says how to run one,
in exactly two ways: :meth:`Runner.run` blocks the calling thread (the sync face) and
:meth:`Runner.run_async` is awaited from an event loop (``semaphore_recipes.aio``).
The faces call nothing else to reach the store, so no step exists twice.

A program that has nothing to wait for (an in-process store, a write sent without
waiting for its reply) still is one: ``yield from ()`` makes a function a program.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, TypeVar

from .._core.program import Program
from ..errors import NotSupported
from .capabilities import Capability

__all__ = ["Program", "Runner"]

T = TypeVar("T")


class Runner(ABC):
    """What runs a backend's programs (``Backend`` is one)."""

    #: the URL scheme, named by NotSupported
    scheme: ClassVar[str]

    @abstractmethod
    def run(self, program: Program[T]) -> T:
        """Run ``program`` to its answer, blocking: each request it yields is sent and
        its reply sent back in (its exception thrown in at the ``yield``). What bounds
        each wait is the program's (its deadline, or the request timeout)."""

    async def run_async(self, program: Program[T]) -> T:
        """Run ``program`` awaited, from the event loop the backend was connected in;
        a cancellation of the awaiting task is thrown into the program. Required by
        ``Capabilities(async_face=True)``."""
        program.close()
        raise NotSupported(self.scheme, Capability.ASYNC_FACE.value, "async_face")
