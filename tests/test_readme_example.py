"""examples/readme_example.py, the README's example made runnable, does what it prints,
whatever the store already holds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import semaphore_recipes as sr

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "readme_example.py"


@pytest.mark.parametrize("store", ["zookeeper", "etcd", "redis"])
def test_the_readme_example_runs_on_a_real_server(
    store: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{store}_url")
    backend = request.getfixturevalue(f"{store}_backend")()
    # the README's own semaphore, already there with another capacity and in use
    held = backend.semaphore("db-pool", capacity=10).acquire(permits=5)
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    granted = re.findall(r"(worker-\d) got (\d) permit\(s\), fencing token (\d+)", out)
    assert [name for name, _, _ in granted] == [f"worker-{i}" for i in range(5)], out
    tokens = [int(token) for _, _, token in granted]
    assert tokens == sorted(tokens) and len(set(tokens)) == 5, out
    for line in re.findall(r"inside now: \[(.*)\]", out):
        names = re.findall(r"worker-(\d)", line)
        assert sum(2 if n in "23" else 1 for n in names) <= 2, out  # workers 2, 3: 2 each
    assert "non-blocking acquire refused as expected" in out, out
    assert out.count(" released") == 5, out
    assert "done: at most 2 of 2 permits held at once; granted in arrival order: True" in out
    (name,) = re.findall(r"connected: <Semaphore '([\w.-]+)' capacity=2>", out)
    with pytest.raises(sr.SemaphoreNotFound):  # the example's own semaphore is deleted
        backend.semaphore(name, create=False)
    assert held.state is sr.PermitState.HELD
    held.release()
