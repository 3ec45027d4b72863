"""The contract suite ships with the package: run from a directory outside the checkout,
the way a third-party backend runs it (``--pyargs``, the store chosen with ``--semaphore-store``),
it passes against ``memory://``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import semaphore_recipes

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [
    "-m",
    "pytest",
    "--pyargs",
    "semaphore_recipes.testing.contract",
    "--semaphore-store",
    "memory",
]


def _count(summary: str, outcome: str) -> int:
    found = re.search(rf"(\d+) {outcome}", summary)
    return int(found.group(1)) if found else 0


@pytest.mark.slow
def test_the_shipped_suite_passes_on_memory_from_outside_the_checkout(tmp_path: Path) -> None:
    assert not tmp_path.resolve().is_relative_to(ROOT)
    assert not any(tmp_path.iterdir())  # nothing of the checkout copied in
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SEMAPHORE_RECIPES_", "PYTEST_"))
    }
    # importable as an installed package would be: the package's parent on the path
    env["PYTHONPATH"] = str(Path(semaphore_recipes.__file__).resolve().parents[1])
    result = subprocess.run(
        [sys.executable, *COMMAND, "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, output[-4000:]
    assert _count(summary, "passed") > 0, output[-4000:]
    assert _count(summary, "failed") == 0 and _count(summary, "error") == 0, summary
