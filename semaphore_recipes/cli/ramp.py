"""``set-capacity NAME N --ramp STEP/INTERVAL``, ``--resume`` and ``--cancel``: move a
semaphore's capacity in steps.

The ramp's plan is stored beside the capacity, and this process applies its steps,
waiting between them (one line on stdout per step); it returns at the target (exit
0). If the plan is dropped or replaced meanwhile (a plain ``set-capacity``,
``--cancel``, another ``--ramp``) it stops at its next step (exit 80). Ctrl-C or
SIGTERM stops it too, leaving the plan stored (exit 130 / 143: ``--resume``
continues it, from any host). ``--resume`` with no plan stored, and ``--cancel`` with
none, say so and exit 0.

Connection loss: a request the server does not answer within the request timeout
exits 69; the plan stays stored (a step's write may still have been applied: the
next read shows it), and ``--resume`` continues.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from .._core.ramp import Ramp
from ._common import PROG, CliError, ExitCode, connect

#: the exit status when a signal stopped the ramp (128 + N, the shell's convention)
_STOPPED_BY = {signal.SIGINT: 130, signal.SIGTERM: 143}


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stopped(signum)


def set_capacity_by_ramp(
    url: str, name: str, capacity: int | None, ramp: Ramp | None, cancel: bool
) -> int:
    """Start a ramp to ``capacity`` (``ramp`` given), resume the stored one (neither
    given) or drop it (``cancel``): the exit status."""
    previous = {sig: signal.signal(sig, _stop) for sig in _STOPPED_BY}
    backend = connect(url)
    try:
        sem = backend.semaphore(name, create=False)
        if cancel:
            if sem.cancel_ramp():
                print(f"{name}: ramp cancelled at capacity {sem.status().capacity}", flush=True)
            else:
                print(f"{name}: no ramp under way", flush=True)
            return 0

        def stepped(now: int, version: int) -> None:
            print(f"{name}: capacity {now} (version {version})", flush=True)

        if ramp is not None:
            assert capacity is not None
            target = capacity
            print(
                f"{name}: ramp {sem.capacity} -> {target} by {ramp.step} every {ramp.interval:g}s",
                flush=True,
            )
            sem.set_capacity(target, ramp=ramp, on_step=stepped)
        else:
            stored = sem.status().ramp
            if stored is None or not sem.resume_ramp(on_step=stepped):
                print(f"{name}: no ramp to resume", flush=True)
                return 0
            target = stored.target
        status = sem.status()
        if status.ramp is not None or status.capacity != target:
            raise CliError(
                ExitCode.RAMP_CANCELLED,
                f"{name}: the ramp was cancelled or replaced by another client "
                f"(capacity {status.capacity})",
            )
        print(f"{name}: capacity {status.capacity}, ramp done", flush=True)
        return 0
    except _Stopped as stopped:
        print(
            f"{name}: ramp stopped; its plan stays stored "
            f"(`{PROG} set-capacity {name} --resume` continues it)",
            file=sys.stderr,
            flush=True,
        )
        return _STOPPED_BY[signal.Signals(stopped.signum)]
    finally:
        backend.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
