"""Worker processes seen from the orchestrator: start, send a command, expect a line.

Every worker started here is killed when the run ends (``Workers.close``, also on
errors); each one also stops by itself after its ``max_seconds``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .impls import Target

ROOT = Path(__file__).resolve().parent.parent


class WorkerError(RuntimeError):
    pass


class WorkerTimeout(WorkerError):
    """The line awaited did not come in time (the worker may still be running)."""


@dataclass
class Interpreter:
    """The Python that runs a worker, and what it needs in its environment."""

    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)


class Worker:
    def __init__(
        self, spec: dict[str, Any], log_dir: Path, interpreter: Interpreter, label: str
    ) -> None:
        self.label = label
        self.log_path = log_dir / f"{label}.log"
        env = dict(os.environ)
        env.update(interpreter.env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [interpreter.python, "-m", "benchmarks.worker", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=ROOT,
            env=env,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()  # (SimpleQueue: see _inbox.py)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerError(f"worker {self.label} is gone: {self.log_tail()}") from None

    def expect(self, word: str, timeout: float = 60.0) -> str:
        """The rest of the next line that starts with ``word``."""
        return self.expect_any((word,), timeout)[1]

    def expect_any(self, words: tuple[str, ...], timeout: float = 60.0) -> tuple[str, str]:
        """The first word and the rest of the next line that starts with one of ``words``."""
        found = self.next_line(words, timeout)
        if found is None:
            raise WorkerTimeout(
                f"worker {self.label}: no {' or '.join(words)} within {timeout:g} s; "
                f"{self.log_tail()}"
            )
        return found

    def next_line(self, words: tuple[str, ...], timeout: float) -> tuple[str, str] | None:
        """As :meth:`expect_any`, but None when ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None or line.startswith("ERROR"):
                time.sleep(0.2)  # let its traceback reach the log
                raise WorkerError(f"worker {self.label} failed: {line}; {self.log_tail()}")
            word = line.split(" ", 1)[0]
            if word in words:
                return word, line[len(word) :].strip()

    def process_status(self) -> dict[str, int]:
        """The worker's resident set (VmRSS, kB) and native threads (Threads), read from
        outside (``/proc``); empty once it has ended (reaped or not)."""
        out = {}
        try:
            with open(f"/proc/{self.proc.pid}/status") as status:
                for line in status:
                    key, _, value = line.partition(":")
                    if key in ("VmRSS", "Threads"):
                        out[key] = int(value.split()[0])
        except OSError:
            return {}
        # an ended worker not yet reaped (a zombie) still has a status, without VmRSS
        return out if "VmRSS" in out else {}

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        tail = "\n".join(text.splitlines()[-lines:])
        return f"log {self.log_path}:\n{tail}" if tail else f"(empty log {self.log_path})"

    def finish(self, timeout: float = 20.0) -> None:
        """Close stdin (the worker's signal to stop) and wait; kill if it lingers."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class Workers:
    """The workers of one measurement; ``with Workers(...) as w:`` kills leftovers."""

    def __init__(self, log_dir: Path, max_seconds: float) -> None:
        self.log_dir = log_dir
        self.max_seconds = max_seconds
        self.all: list[Worker] = []

    def start(
        self,
        label: str,
        mode: str,
        impl: str,
        target: Target,
        interpreter: Interpreter | None = None,
        **extra: Any,
    ) -> Worker:
        spec = {
            "mode": mode,
            "impl": impl,
            "target": target.to_json(),
            "max_seconds": self.max_seconds,
            **extra,
        }
        worker = Worker(spec, self.log_dir, interpreter or Interpreter(), label)
        self.all.append(worker)
        return worker

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self.all:
            worker.kill()
