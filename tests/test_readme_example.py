"""examples/readme_example.py, the README's example made runnable, does what it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "readme_example.py"


@pytest.mark.parametrize("store", ["zookeeper", "etcd"])
def test_the_readme_example_runs_on_a_real_server(
    store: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    granted = re.findall(r"(worker-\d) got (\d) permit\(s\), fencing token (\d+)", out)
    assert [name for name, _, _ in granted] == [f"worker-{i}" for i in range(5)], out
    tokens = [int(token) for _, _, token in granted]
    assert tokens == sorted(tokens) and len(set(tokens)) == 5, out
    for line in re.findall(r"inside now: \[(.*)\]", out):
        names = re.findall(r"worker-(\d)", line)
        assert sum(2 if n == "2" else 1 for n in names) <= 2, out
    assert "non-blocking acquire refused as expected" in out, out
    assert out.count(" released") == 5, out
