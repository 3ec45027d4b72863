"""``dev-server`` (start, serve, clean stop) and ``demo`` on the embedded default."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import semaphore_recipes as sr

from .conftest import CLI, Lines, assert_one_line_error, clean_env, cli


@pytest.mark.parametrize("backend", ["etcd", "zookeeper"])
def test_dev_server_serves_and_stops_cleanly_removing_its_data(backend: str) -> None:
    proc = subprocess.Popen(
        [*CLI, "dev-server", "--backend", backend, "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    output = Lines(proc)
    try:
        lines = [output.next(60) for _ in range(3)]
        data_match = re.search(r"data:\s+(\S+)", lines[1])
        url_match = re.search(r"export SEMAPHORE_RECIPES_URL=(\S+)", lines[2])
        assert data_match and url_match, lines
        data, url = Path(data_match.group(1)), url_match.group(1)
        assert url.startswith(f"{backend}://127.0.0.1:")
        assert data.is_dir()
        with sr.connect(url) as b, b.semaphore("dev", 1).acquire(timeout=20) as permit:
            assert permit.token > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        out = output.rest(10)
        err = proc.stderr.read() if proc.stderr is not None else ""
        assert "Traceback" not in err
        assert f"removed {data}" in out
        assert not data.exists()
        host, port = url.split("//")[1].split(":")
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=2).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_dev_server_on_a_busy_port_exits_69() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        result = cli("dev-server", "--port", str(s.getsockname()[1]))
    assert result.returncode == 69
    assert_one_line_error(result)
    assert "in use" in result.stderr


def test_dev_server_without_etcd_exits_69_naming_the_install(tmp_path: Path) -> None:
    env = clean_env(ETCD_BINARY=str(tmp_path / "no-etcd"), TMPDIR=str(tmp_path))
    result = cli("dev-server", "--port", "0", env=env)
    assert result.returncode == 69
    assert_one_line_error(result)
    assert "apt-get install -y etcd-server" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_dev_server_that_does_not_start_exits_69_leaving_no_directory(tmp_path: Path) -> None:
    # a classpath without ZooKeeper's classes: java starts, finds no server, exits
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = clean_env(ZOOKEEPER_CLASSPATH=str(tmp_path / "missing.jar"), TMPDIR=str(scratch))
    result = cli("dev-server", "--backend", "zookeeper", "--port", "0", env=env, timeout=120)
    assert result.returncode == 69
    assert_one_line_error(result)
    assert "zookeeper server did not start" in result.stderr
    assert "exited with code" in result.stderr
    assert list(scratch.iterdir()) == []


def test_demo_on_the_embedded_etcd_passes_and_exits_0() -> None:
    started = time.monotonic()
    result = cli("demo", timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    summary = out[out.index("== Summary") :]
    for scene in ("FIFO", "crash release", "fencing"):
        assert re.search(rf"^  {scene}\s+ok\s", summary, re.M), summary
    assert "granted in arrival order A B C D E F" in summary
    assert "REJECTED" in out and "FAILED" not in out
    assert "demo finished" in out
    assert "Traceback" not in result.stderr
    assert took < 60, f"the demo took {took:.1f} s"


def test_demo_fifo_verdict_catches_overtaking_and_overuse() -> None:
    """The demo's own check can fail: fed made-up worker lines, it sees violations."""
    from semaphore_recipes.cli.demo import FIFO_PLAN, fifo_verdict

    def lines(token: int, granted: float, released: float) -> list[dict[str, object]]:
        return [
            {"event": "granted", "t": granted, "token": token, "waited": 0.0},
            {"event": "releasing", "t": released},
        ]

    # A B C D E F with weights 1 1 2 1 3 1, capacity 3, as the demo runs them
    good = [lines(1, 0.0, 1.0), lines(2, 0.01, 1.01), lines(3, 1.02, 2.0),
            lines(4, 1.03, 2.01), lines(5, 2.02, 3.0), lines(6, 3.01, 4.0)]  # fmt: skip
    assert fifo_verdict(good) == (True, [label for label, _ in FIFO_PLAN], 3)
    # reported out of order within one wave: still FIFO (B's line came first)
    wave = [lines(1, 0.02, 1.0), lines(2, 0.0, 1.01), *good[2:]]
    assert fifo_verdict(wave)[:2] == (True, ["A", "B", "C", "D", "E", "F"])
    # D (1 permit) granted before C (2 permits) after only A's release: overtaking
    overtaken = [lines(1, 0.0, 1.0), lines(2, 0.01, 1.5), lines(3, 1.6, 2.5),
                 lines(4, 1.02, 2.0), lines(5, 2.6, 3.0), lines(6, 3.01, 4.0)]  # fmt: skip
    ok, order, _ = fifo_verdict(overtaken)
    assert not ok and order.index("D") < order.index("C")
    # E (3 permits) granted while C still holds: more than the capacity at once
    overused = [*good[:4], lines(5, 1.5, 3.0), good[5]]
    assert fifo_verdict(overused)[2] > 3
