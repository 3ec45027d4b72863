"""Worker processes of the tests (``python -m semaphore_recipes.testing.worker``), and the
``workers`` fixture that kills those still running at teardown.

A worker is a separate process with its own backend and session: what one test sees of
it is its stdout lines (``Workers.expect``) and the checker file it writes
(``semaphore_recipes.testing.checker``). An in-process ``memory://`` store cannot be
shared with another process: a test on memory that asks for ``workers`` is skipped.
"""

from __future__ import annotations

import selectors
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from .faces import Face
from .harness import Harness

__all__ = ["WORKER", "Workers", "workers"]

#: the command line of one worker process, before its own arguments
WORKER = [sys.executable, "-m", "semaphore_recipes.testing.worker"]


class Workers:
    """Worker processes (``semaphore_recipes.testing.worker``), killed at teardown if still
    running."""

    def __init__(self, face: Face = Face.SYNC) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.face = face  # the test's: its workers drive the same face

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [*WORKER, *args, "--face", self.face.value],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    @staticmethod
    def expect(proc: subprocess.Popen[str], prefix: str, timeout: float = 20.0) -> str:
        """Read the worker's stdout until a line starting with ``prefix``."""
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith(prefix):
                    return line.strip()
        err = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
        raise AssertionError(f"worker never printed {prefix!r} (exit {proc.poll()}): {err[-2000:]}")


@pytest.fixture
def workers(request: pytest.FixtureRequest) -> Iterator[Workers]:
    """Worker processes driving the face of the test's ``service`` or ``cluster``."""
    face = Face.SYNC
    for name in ("service", "cluster"):
        if name in request.fixturenames:
            harness: Harness = request.getfixturevalue(name)
            if harness.kind == "memory":
                pytest.skip("worker processes cannot share an in-process memory store")
            face = harness.face
    w = Workers(face)
    yield w
    for proc in w.procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
