"""``semaphore-recipes run``: exit codes, the child's environment, signals, lost permits."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from .conftest import Spawner, Store, assert_one_line_error, cli, closed_port, wait_for

# Backend-independent behaviour runs on etcd only (time budget): `service` is the
# parametrized fixture of tests/conftest.py, narrowed here with indirect parametrization.
ETCD_ONLY = pytest.mark.parametrize("service", ["etcd"], indirect=True)


def test_child_gets_token_name_and_url_and_its_exit_status_is_returned(
    store: Store, tmp_path: Path
) -> None:
    env_file = tmp_path / "env"
    result = cli(
        "run",
        "jobs",
        "--capacity",
        "2",
        "--url",
        store.url,
        "--",
        "sh",
        "-c",
        f'env | grep ^SEMAPHORE_RECIPES_ > "{env_file}"; exit 7',
    )
    assert result.returncode == 7, result.stderr
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert env["SEMAPHORE_RECIPES_NAME"] == "jobs"
    assert env["SEMAPHORE_RECIPES_URL"] == store.url
    assert env["SEMAPHORE_RECIPES_PERMITS"] == "1"
    assert int(env["SEMAPHORE_RECIPES_TOKEN"]) > 0
    assert store.entries("jobs") == []  # released when the command ended


@ETCD_ONLY
def test_url_comes_from_the_environment_and_weights_are_passed(
    store: Store, tmp_path: Path
) -> None:
    from .conftest import clean_env

    out = tmp_path / "out"
    result = cli(
        "run",
        "w",
        "-c",
        "3",
        "-p",
        "3",
        "--",
        "sh",
        "-c",
        f'echo "$SEMAPHORE_RECIPES_PERMITS $SEMAPHORE_RECIPES_URL" > "{out}"',
        env=clean_env(SEMAPHORE_RECIPES_URL=store.url),
    )
    assert result.returncode == 0, result.stderr
    assert out.read_text().split() == ["3", store.url]


@pytest.mark.parametrize(
    "service, sig, code",
    [("zookeeper", signal.SIGTERM, 42), ("etcd", signal.SIGTERM, 42), ("etcd", signal.SIGINT, 43)],
    indirect=["service"],
)
def test_signals_are_forwarded_to_the_child(
    store: Store, spawn: Spawner, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = (
        f"trap 'echo TERM > \"{got}\"; kill $! 2>/dev/null; exit 42' TERM; "
        f"trap 'echo INT > \"{got}\"; kill $! 2>/dev/null; exit 43' INT; "
        f'touch "{ready}"; sleep 30 & wait $!'
    )
    run = spawn("run", "sig", "-c", "1", "--url", store.url, "--", "sh", "-c", script)
    wait_for(ready.exists, 30, "the child to start")
    run.proc.send_signal(sig)
    assert run.wait(10) == code, run.stderr()
    assert got.read_text().strip() == sig.name.removeprefix("SIG")
    assert store.entries("sig") == []


@ETCD_ONLY
def test_exit_status_is_128_plus_the_signal_that_killed_the_child(store: Store) -> None:
    result = cli("run", "k", "-c", "1", "--url", store.url, "--", "sh", "-c", "kill -TERM $$")
    assert result.returncode == 128 + signal.SIGTERM, result.stderr


def test_revoked_permit_terminates_the_child_within_a_second(
    store: Store, spawn: Spawner, tmp_path: Path
) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = (
        f"trap 'date +%s.%N > \"{got}\"; kill $! 2>/dev/null; exit 0' TERM; "
        f'touch "{ready}"; sleep 30 & wait $!'
    )
    run = spawn("run", "rv", "-c", "1", "--url", store.url, "--", "sh", "-c", script)
    wait_for(ready.exists, 30, "the child to start")
    revoked = time.time()
    store.revoke("rv")
    code = run.wait(10)
    assert code == 76, run.stderr()
    assert float(got.read_text()) - revoked < 1.0, "SIGTERM came more than 1 s after the loss"
    assert "lost" in run.stderr() and "Traceback" not in run.stderr()


@ETCD_ONLY
def test_child_ignoring_sigterm_is_killed_after_the_grace_period(
    store: Store, spawn: Spawner, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    script = f'trap \'\' TERM; echo $$ > "{ready}.tmp"; mv "{ready}.tmp" "{ready}"; '
    script += "while :; do sleep 0.1; done"
    run = spawn(
        "run", "g", "-c", "1", "--grace", "0.5", "--url", store.url, "--", "sh", "-c", script
    )
    wait_for(ready.exists, 30, "the child to start")
    child = int(ready.read_text())
    revoked = time.monotonic()
    store.revoke("g")
    assert run.wait(10) == 76, run.stderr()
    took = time.monotonic() - revoked
    assert 0.5 <= took < 3.0, took
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert "SIGKILL" in run.stderr()


@ETCD_ONLY
def test_on_lost_ignore_only_warns_and_keeps_the_childs_status(
    store: Store, spawn: Spawner, tmp_path: Path
) -> None:
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    script = f'touch "{ready}"; while [ ! -e "{stop}" ]; do sleep 0.05; done; exit 5'
    run = spawn(
        "run", "ig", "-c", "1", "--on-lost", "ignore", "--url", store.url, "--", "sh", "-c", script
    )
    wait_for(ready.exists, 30, "the child to start")
    store.revoke("ig")
    wait_for(lambda: "--on-lost=ignore" in run.stderr(), 5, "the warning")
    assert run.proc.poll() is None, "the child was stopped despite --on-lost=ignore"
    stop.touch()
    assert run.wait(10) == 5, run.stderr()


@ETCD_ONLY
def test_acquire_timeout_exits_75_without_running_the_command(store: Store, tmp_path: Path) -> None:
    backend = store.service.connect()
    permit = backend.semaphore("busy", 1).acquire()
    ran = tmp_path / "ran"
    try:
        for timeout in ("0.5", "0"):
            result = cli(
                "run",
                "busy",
                "-c",
                "1",
                "--timeout",
                timeout,
                "--url",
                store.url,
                "--",
                "touch",
                str(ran),
            )
            assert result.returncode == 75, result.stderr
            assert_one_line_error(result)
        assert not ran.exists()
        assert len(store.entries("busy")) == 1  # the holder only: the waiter left
    finally:
        permit.release()


def test_also_takes_several_semaphores_atomically(store: Store, tmp_path: Path) -> None:
    """``--also OTHER:K``: the command runs holding NAME and OTHER (one token), waits
    while OTHER is full, and every entry goes when it ends or times out."""
    backend = store.service.connect()
    backend.semaphore("gpu", 1)
    blocker = backend.semaphore("db", 2).acquire(permits=2)
    env_file = tmp_path / "env"
    job = ["run", "job", "-c", "2", "--also", "gpu:1", "--also", "db:1", "--url", store.url]
    timed_out = cli(*job, "--timeout", "0.3", "--", "touch", str(env_file))
    assert timed_out.returncode == 75, timed_out.stderr
    assert_one_line_error(timed_out)
    assert not env_file.exists()
    assert store.entries("job") == store.entries("gpu") == []
    blocker.release()
    command = f'env | grep ^SEMAPHORE_RECIPES_ > "{env_file}"'
    result = cli(*job, "--", "sh", "-c", command)
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert env["SEMAPHORE_RECIPES_NAME"] == "job"
    assert env["SEMAPHORE_RECIPES_ALSO"] == "gpu:1,db:1"
    assert int(env["SEMAPHORE_RECIPES_TOKEN"]) > 0
    assert store.entries("job") == store.entries("gpu") == store.entries("db") == []


@ETCD_ONLY
def test_capacity_mismatch_adopt_and_command_not_found(store: Store) -> None:
    assert cli("run", "m", "-c", "2", "--url", store.url, "--", "true").returncode == 0
    mismatch = cli("run", "m", "-c", "3", "--url", store.url, "--", "true")
    assert mismatch.returncode == 65
    assert_one_line_error(mismatch)
    assert "set-capacity" in mismatch.stderr
    adopted = cli("run", "m", "-c", "3", "--adopt-capacity", "--url", store.url, "--", "true")
    assert adopted.returncode == 0, adopted.stderr
    missing = cli("run", "m", "-c", "2", "--url", store.url, "--", "no-such-command-here")
    assert missing.returncode == 127
    assert_one_line_error(missing)


@pytest.mark.parametrize("scheme", ["etcd", "zookeeper"])
def test_unreachable_server_exits_69_with_one_line(scheme: str) -> None:
    url = f"{scheme}://127.0.0.1:{closed_port()}/x?connect_timeout=1"
    started = time.monotonic()
    result = cli("run", "u", "-c", "1", "--url", url, "--", "true")
    assert result.returncode == 69, result.stderr
    assert_one_line_error(result)
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "bad/name", "-c", "1", "--url", "etcd://127.0.0.1:1", "--", "true"], "name"),
        (["run", "ok", "-c", "1", "--url", "http://127.0.0.1:1", "--", "true"], "URL"),
        (["run", "ok", "-c", "1", "--url", "etcd://127.0.0.1:1"], "command"),
        (["run", "ok", "-c", "1", "--", "true"], "SEMAPHORE_RECIPES_URL"),
        (["run", "ok", "-c", "1", "-p", "2", "--url", "etcd://h:1", "--", "true"], "permits"),
        (["run", "ok", "--url", "etcd://h:1", "--", "true"], "capacity"),
        (["status", "ok", "--url", "etcd://h:1", "--", "true"], "command"),
        (["nonsense"], "invalid choice"),
        (["run", "ok", "-c", "1", "--also", "x", "--url", "etcd://h:1", "--", "true"], "OTHER:K"),
        (["run", "ok", "-c", "1", "--also", "x:0", "--url", "etcd://h:1", "--", "true"], "x:0"),
        (["run", "ok", "-c", "1", "--also", "ok:1", "--url", "etcd://h:1", "--", "true"], "twice"),
    ],
)
def test_usage_errors_exit_64_before_any_io(args: list[str], needle: str) -> None:
    result = cli(*args, timeout=20)
    assert result.returncode == 64, result.stderr
    assert_one_line_error(result)
    assert needle in result.stderr


def test_console_script_is_installed_and_runs_main() -> None:
    import subprocess
    from importlib.metadata import entry_points

    from semaphore_recipes.testing.programs import find_program

    [script] = entry_points(group="console_scripts", name="semaphore-recipes")
    assert script.value == "semaphore_recipes.cli:main"
    path = find_program("semaphore-recipes")  # beside sys.executable, else on PATH
    result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("semaphore-recipes ")
