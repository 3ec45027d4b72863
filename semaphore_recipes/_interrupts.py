"""Holding Ctrl-C back while a short blocking call runs on the main thread.

grpc's Python code is not safe against a KeyboardInterrupt raised inside it: one landing
there can leave a channel lock held and hang every later call on that channel. Handing
each call to a worker thread avoids that but costs two thread switches per call, a
sizeable part of an uncontended acquire (docs/design.md section 7). Instead, a
main-thread call runs with SIGINT recorded rather than raised, and the interrupt is
delivered the moment the call returns, so it lands in our code, where the usual cleanup
runs. Only use it around calls bounded by a timeout of a few seconds: that is the
longest Ctrl-C can be held.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

_signal: Any
try:  # signal's C functions: the signal module wraps every call's result in an enum
    import _signal  # type: ignore[import-not-found,no-redef]
except ImportError:  # not CPython
    _signal = signal

T = TypeVar("T")
_SIGINT = int(signal.SIGINT)


def call_with_sigint_held(fn: Callable[[], T]) -> T:
    """Call ``fn``; on the main thread, a SIGINT meanwhile is re-delivered after it."""
    if threading.current_thread() is not threading.main_thread():
        return fn()  # Python delivers signals to the main thread only
    handler = _signal.getsignal(_SIGINT)
    if not callable(handler):
        return fn()  # SIG_IGN, SIG_DFL or a C handler: no exception can come from it
    caught: list[tuple[int, FrameType | None]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append((signum, frame))

    _signal.signal(_SIGINT, hold)
    try:
        return fn()
    finally:
        _signal.signal(_SIGINT, handler)
        if caught:
            handler(*caught[0])  # usually raises KeyboardInterrupt, here, after the call
