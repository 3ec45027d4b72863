"""The client processes of a run: each slot is one client (a process incarnation at a
time, restarted after a kill -9) behind its own fault proxies, one per member."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from semaphore_recipes.testing.proxy import FaultProxy

from .model import ClientOp, OpKind, Outcome


class ClientSlot:
    def __init__(self, index: int, rundir: Path, upstreams: list[str], command: list[str]) -> None:
        self.index = index
        self.rundir = rundir
        self.proxies = [FaultProxy(u).start() for u in upstreams]
        self.command = command  # everything but URL, owner and log
        self.incarnation = -1
        self.proc: subprocess.Popen[bytes] | None = None
        self.owners: list[str] = []

    @property
    def owner(self) -> str:
        return f"c{self.index}.{self.incarnation}"

    def log_path(self, owner: str) -> Path:
        return self.rundir / f"ops-{owner}.jsonl"

    def spawn(self, url_for: list[str]) -> None:
        self.incarnation += 1
        self.owners.append(self.owner)
        out = open(self.rundir / f"client-{self.owner}.log", "ab")  # noqa: SIM115 - the child's
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "chaos.client", *url_for, self.owner,
                 str(self.log_path(self.owner)), *self.command],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        finally:
            out.close()

    @property
    def proxy_addresses(self) -> list[str]:
        return [p.address for p in self.proxies]

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def is_idle(self) -> bool:
        path = self.log_path(self.owner)
        return path.exists() and b'"ev":"idle"' in path.read_bytes()

    def stop(self, timeout: float) -> bool:
        """SIGTERM and wait; SIGKILL after ``timeout``. True if it exited by itself."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            self.kill9()
            return False

    def restore_network(self) -> None:
        for proxy in self.proxies:
            proxy.restore()

    def close(self) -> None:
        self.signal(signal.SIGCONT)
        self.kill9()
        for proxy in self.proxies:
            proxy.close()


def read_ops(path: Path, owner: str) -> list[ClientOp]:
    """The calls of one client incarnation (a call without an end line never returned)."""
    starts: dict[int, dict[str, object]] = {}
    ends: dict[int, dict[str, object]] = {}
    if not path.exists():
        return []
    for line in path.read_bytes().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the line being written at a kill -9
        if record.get("ev") == "start":
            starts[record["id"]] = record
        elif record.get("ev") == "end":
            ends[record["id"]] = record
    ops = []
    for op_id, start in sorted(starts.items()):
        end = ends.get(op_id)
        ops.append(
            ClientOp(
                client=owner,
                thread=int(start["t"]),  # type: ignore[call-overload]
                kind=OpKind(start["op"]),
                start=float(start["ts"]),  # type: ignore[arg-type]
                end=None if end is None else float(end["ts"]),  # type: ignore[arg-type]
                outcome=Outcome.UNFINISHED if end is None else Outcome(end["outcome"]),
                bound=float(start["bound"]),  # type: ignore[arg-type]
                key=None if end is None else end.get("key"),  # type: ignore[arg-type]
                token=None if end is None else end.get("token"),  # type: ignore[arg-type]
                detail="" if end is None else str(end.get("detail", "")),
            )
        )
    return ops


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
