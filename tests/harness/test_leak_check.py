"""The plugin's leak check at teardown: on ``memory://`` no session ends by itself, so
an entry left behind fails the test at once instead of after the 12 s that a network
store's sessions get to run out."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

LEAKY = """
import semaphore_recipes as sr


def test_leaves_an_entry(memory_backend, memory_url):
    memory_backend()  # the factory's leak check runs at teardown
    leaked = sr.connect(memory_url)  # not made by the factory: never closed
    leaked.semaphore("leak", capacity=1).acquire()
"""


def test_an_entry_left_on_a_memory_store_fails_the_test_without_waiting(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
         "--durations-min=0", str(tmp_path / "test_leaky.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "queue entries left behind" in out, out
    [teardown] = re.findall(r"([\d.]+)s teardown", out)
    assert float(teardown) < 5.0, out  # (it waited 12 s)
