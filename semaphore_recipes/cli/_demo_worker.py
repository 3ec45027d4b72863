"""One worker process of ``semaphore-recipes demo`` (not a public interface).

    SEMAPHORE_RECIPES_URL=... python -m semaphore_recipes.cli._demo_worker '{"name": ..., ...}'

It connects, says ``ready``, waits for ``go`` on stdin, acquires, and reports every step
as one JSON line on stdout with a ``time.monotonic()`` stamp (the same clock in every
process of the machine, so the demo can order the lines of all workers).

Modes: ``hold`` holds for ``hold`` seconds (or, when negative, until ``release`` on
stdin); ``fence`` writes the demo's resource through ``permit.transaction()`` once
granted, then once more when told ``write`` (after being paused past its lease), and
releases on ``release``. Connection loss: the library's behaviour, unchanged; a fenced
write that meets an unreachable server is retried for up to 15 s.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

import semaphore_recipes as sr

from ._common import ENV_URL


def emit(event: str, **fields: Any) -> None:
    doc = {"t": time.monotonic(), "event": event, **fields}
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def command() -> str:
    line = sys.stdin.readline()
    return line.strip() or "eof"


def fenced_write(permit: sr.Permit, resource: str, value: bytes) -> None:
    """Write ``value`` to the resource only while ``permit`` is held (PermitLost if not)."""
    deadline = time.monotonic() + 15.0
    while True:
        tx = permit.transaction().set(resource, value)
        try:
            tx.commit()
            return
        except sr.BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    cfg = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, format=f"{cfg['label']}: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    owner = f"worker-{cfg['label']} pid {os.getpid()}"
    backend = sr.connect(os.environ[ENV_URL], owner=owner)
    try:
        sem = backend.semaphore(cfg["name"], cfg["capacity"])
        emit("ready", owner=owner, pid=os.getpid())
        if command() != "go":
            return 0
        started = time.monotonic()
        permit = sem.acquire(cfg["permits"], timeout=60.0, watch_entry=True)
        emit("granted", token=permit.token, waited=time.monotonic() - started)
        if cfg["mode"] == "hold":
            if cfg["hold"] >= 0:
                time.sleep(cfg["hold"])
            else:
                command()
        else:
            value = f"written by {cfg['label']} with token {permit.token}".encode()
            fenced_write(permit, cfg["resource"], value)
            emit("write-ok", token=permit.token)
            if command() == "write":
                lost_seen = permit.lost.is_set()
                try:
                    fenced_write(permit, cfg["resource"], value)
                    emit("write-ok", token=permit.token, lost_seen=lost_seen)
                except sr.PermitLost as exc:
                    emit("write-rejected", token=permit.token, lost_seen=lost_seen, error=str(exc))
                command()
        emit("releasing", state=permit.state.value)
        permit.release()
        emit("released")
        return 0
    finally:
        backend.close()


if __name__ == "__main__":
    sys.exit(main())
