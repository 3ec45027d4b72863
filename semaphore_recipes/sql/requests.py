"""What a SQL program may yield besides its statements, and what a step takes.

A dialect's runner answers its own statement request and these two: :class:`Pause`
(wait, e.g. before sending a statement again) and :class:`Soon` (start a follow-up
once the current step is over). :data:`StepArg` is what ``SQLBackend.step`` takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..backend import Program

__all__ = ["Pause", "Soon", "StepArg"]

#: what a step takes: text, numbers, flags, lists of them (arrays), byte strings
StepArg = str | int | bool | bytes | None | Sequence[str] | Sequence[int] | Sequence[bytes]


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds`` (before sending a statement again)."""

    seconds: float


@dataclass(frozen=True)
class Soon:
    """Start ``program()`` once the step that yields this is over, not waiting for it
    (``failed()`` when it ends with a SemaphoreError). The asyncio runner starts it on
    the loop's next turn, once the awaiting task has ended its step; the blocking
    runner runs it at once."""

    program: Callable[[], Program[object]]
    failed: Callable[[], None]
