"""examples/aio_example.py, the asyncio face's runnable example, does what it says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "aio_example.py"


def test_the_asyncio_example_runs_on_memory() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "'cancelled': 5" in out
    assert "granted in FIFO order: True" in out
    assert "left in the queue: 0" in out
