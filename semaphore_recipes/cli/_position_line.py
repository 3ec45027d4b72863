"""What ``run`` shows on stderr while it waits: its place in the queue and the time waited.

On a terminal one line, rewritten in place (``\\r``) at each report; otherwise (a log
file, a pipe) one line per change of place, so a log grows with the queue's moves, not
with time. The line is ended when the wait ends (granted or not), so later messages
start on a line of their own. The reports come from ``acquire(on_position=...)``.
"""

from __future__ import annotations

import sys
from typing import TextIO

from .._core.position import Position


class PositionLine:
    """The ``on_position`` callback of ``run`` for semaphore ``name``."""

    def __init__(self, name: str, stream: TextIO | None = None) -> None:
        self._name = name
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = self._stream.isatty()
        self._last: Position | None = None
        self._width = 0  # of the line on the terminal, to blank what a shorter one leaves

    def __call__(self, position: Position) -> None:
        text = f"waiting for {self._name!r}: {position.describe()}, {position.waited:.0f} s"
        if self._terminal:
            self._stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        elif not position.same_place(self._last):
            self._stream.write(text + "\n")
        self._stream.flush()
        self._last = position

    def end(self) -> None:
        """The wait is over: the terminal's line is left as it was, and ended."""
        if self._terminal and self._last is not None:
            self._stream.write("\n")
            self._stream.flush()
        self._last = None
