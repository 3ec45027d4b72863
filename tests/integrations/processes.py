"""The framework processes the integration tests start (uvicorn, Celery workers): from
this interpreter's environment, the repository importable, output to a log file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def spawn(module_args: list[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """``python -m MODULE ARGS`` of this venv in the repository, with ``env`` added."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *module_args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": path, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(processes: list[subprocess.Popen[bytes]], grace: float = 15.0) -> None:
    """SIGTERM each (their warm shutdown), then SIGKILL those still running after ``grace``."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
