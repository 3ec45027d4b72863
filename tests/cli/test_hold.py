"""``semaphore-recipes hold``: the sidecar as a process against real servers, probed over
real HTTP: readiness, the token file, SIGTERM, a lost permit, and its metrics."""

from __future__ import annotations

import json
import re
import signal
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from semaphore_recipes.testing.proxy import FaultProxy

from .conftest import Spawned, Spawner, Store, assert_one_line_error, cli, wait_for

ETCD_ONLY = pytest.mark.parametrize("service", ["etcd"], indirect=True)
BOTH = pytest.mark.parametrize("service", ["zookeeper", "etcd"], indirect=True)


class Sidecar:
    """A ``hold`` process and its HTTP address (from its "listening on" line)."""

    def __init__(self, spawned: Spawned) -> None:
        self.spawned = spawned
        found: list[str] = []

        def listening() -> bool:
            found[:] = re.findall(r"listening on http://(\S+)", spawned.stderr())
            return bool(found) or spawned.proc.poll() is not None

        wait_for(listening, 30, "the sidecar to listen")
        assert found, spawned.stderr()
        self.base = f"http://{found[0]}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Signal it; it must exit 0 within 10 s."""
        self.spawned.proc.send_signal(sig)
        assert self.spawned.wait(10) == 0, self.spawned.stderr()

    def status(self) -> dict[str, object]:
        code, body = self.get("/status")
        assert code == 200, body
        doc: dict[str, object] = json.loads(body)
        return doc

    def state(self) -> str:
        """From ``/readyz``, which answers from memory (``/status`` reads the store)."""
        code, text = self.get("/readyz")
        return "held" if code == 200 else text.strip().removeprefix("not held: ")

    def wait_state(self, state: str, timeout: float = 20) -> None:
        wait_for(lambda: self.state() == state, timeout, f"state {state}")

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``, parsed by prometheus_client's own parser."""
        code, body = self.get("/metrics")
        assert code == 200, body
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }


def sample(
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


Hold = Callable[..., Sidecar]


@pytest.fixture
def hold(spawn: Spawner) -> Iterator[Hold]:
    def start(url: str, name: str, *args: str) -> Sidecar:
        return Sidecar(spawn("hold", name, "--url", url, "--listen", "127.0.0.1:0", *args))

    yield start


def token_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@BOTH
def test_probes_token_file_and_metrics_then_sigterm_grants_the_waiter(
    store: Store, hold: Hold, tmp_path: Path
) -> None:
    token_a, token_b = tmp_path / "a.env", tmp_path / "b.env"
    a = hold(store.url, "side", "-c", "1", "--token-file", str(token_a))
    a.wait_state("held")
    assert a.get("/readyz")[0] == 200
    assert a.get("/healthz")[0] == 200
    doc = a.status()
    env = token_env(token_a)
    assert env["SEMAPHORE_RECIPES_TOKEN"] == str(doc["token"])
    assert env["SEMAPHORE_RECIPES_NAME"] == "side" and env["SEMAPHORE_RECIPES_PERMITS"] == "1"
    semaphore = doc["semaphore"]
    assert isinstance(semaphore, dict)
    assert [h["token"] for h in semaphore["holders"]] == [doc["token"]]

    b = hold(store.url, "side", "-c", "1", "--token-file", str(token_b))
    b.wait_state("waiting")
    code, text = b.get("/readyz")
    assert code == 503 and "waiting" in text
    assert b.get("/healthz")[0] == 200  # waiting is alive
    waiting = b.status()
    assert (waiting["slots"], waiting["slot_tokens"], waiting["token"]) == ([], [], None)
    assert not token_b.exists()
    wait_for(lambda: len(store.entries("side")) == 2, 10, "the waiter's entry")
    m = b.metrics()
    assert sample(m, "semaphore_recipes_requests_waiting", semaphore="side") == 1
    assert sample(m, "semaphore_recipes_permits_held", semaphore="side") == 0

    m = a.metrics()
    assert (
        sample(m, "semaphore_recipes_acquisitions_total", semaphore="side", outcome="granted") == 1
    )
    assert sample(m, "semaphore_recipes_acquire_wait_seconds_count", semaphore="side") == 1
    assert sample(m, "semaphore_recipes_permits_held", semaphore="side") == 1
    assert sample(m, "semaphore_recipes_session_state", backend=store.kind, state="connected") == 1

    a.stop(signal.SIGTERM)
    assert not token_a.exists()  # removed before the release
    b.wait_state("held", timeout=10)
    assert token_env(token_b)["SEMAPHORE_RECIPES_TOKEN"] == str(b.status()["token"])
    assert int(token_env(token_b)["SEMAPHORE_RECIPES_TOKEN"]) > int(env["SEMAPHORE_RECIPES_TOKEN"])
    m = b.metrics()
    assert (
        sample(m, "semaphore_recipes_acquisitions_total", semaphore="side", outcome="granted") == 1
    )
    assert sample(m, "semaphore_recipes_requests_waiting", semaphore="side") == 0
    assert sample(m, "semaphore_recipes_permits_held", semaphore="side") == 1

    b.stop(signal.SIGINT)
    assert store.entries("side") == []


@BOTH
def test_readiness_follows_a_cut_then_a_lost_session_with_on_lost_unready(
    store: Store, hold: Hold, tmp_path: Path
) -> None:
    server = store.service.url.split("://", 1)[1].split("/", 1)[0]
    token = tmp_path / "t.env"
    with FaultProxy(server) as proxy:
        url = store.url.replace(server, proxy.address, 1)
        url = re.sub(r"session_timeout=[^&]*", "session_timeout=3", url)
        if "session_timeout" not in url:
            url += ("&" if "?" in url else "?") + "session_timeout=3"
        s = hold(url, "cut", "-c", "1", "--on-lost", "unready", "--token-file", str(token))
        s.wait_state("held")

        proxy.cut()  # connections reset: the client knows at once
        s.wait_state("suspended")
        code, text = s.get("/readyz")
        assert code == 503 and "suspended" in text
        assert s.get("/healthz")[0] == 200  # the session may still be alive
        assert token.exists()
        proxy.restore()
        s.wait_state("held")
        assert s.get("/readyz")[0] == 200

        if store.kind == "etcd":
            store.revoke("cut")  # the sidecar's lease (its session) revoked on the server
        else:
            proxy.cut()  # ZooKeeper: a whole session timeout without the server
        s.wait_state("lost")
        proxy.restore()
        code, text = s.get("/readyz")
        assert code == 503 and "lost" in text
        assert not token.exists()
        m = s.metrics()
        # (etcd: the entry watch sees the lease's keys go before the keepalive does)
        reason = "session" if store.kind == "zookeeper" else "entry"
        lost = {
            r: sample(m, "semaphore_recipes_permits_lost_total", semaphore="cut", reason=r)
            for r in ("session", "entry")
        }
        assert lost == {r: 1 if r == reason else 0 for r in lost}
        assert sample(m, "semaphore_recipes_permits_held", semaphore="cut") == 0
        assert s.get("/healthz")[0] == 200  # the client lives on, with a new session
        assert s.spawned.proc.poll() is None  # unready, still up
        s.stop(signal.SIGTERM)
    assert store.entries("cut") == []


@BOTH
def test_on_lost_exit_exits_76_and_removes_the_token(
    store: Store, hold: Hold, tmp_path: Path
) -> None:
    token = tmp_path / "t.env"
    s = hold(store.url, "gone", "-c", "1", "--token-file", str(token))
    s.wait_state("held")
    store.revoke("gone")  # ZooKeeper: the entry deleted; etcd: the lease revoked
    assert s.spawned.wait(10) == 76, s.spawned.stderr()
    assert "lost" in s.spawned.stderr() and "Traceback" not in s.spawned.stderr()
    assert "hold: lost 'gone': nothing to release" in s.spawned.stderr()
    assert "released" not in s.spawned.stderr()  # what happened: it was lost
    assert not token.exists()


@ETCD_ONLY
def test_sigterm_while_waiting_leaves_the_queue(store: Store, hold: Hold) -> None:
    a = hold(store.url, "q", "-c", "1")
    a.wait_state("held")
    b = hold(store.url, "q", "-c", "1")
    b.wait_state("waiting")
    wait_for(lambda: len(store.entries("q")) == 2, 10, "the waiter's entry")
    b.stop(signal.SIGTERM)
    assert len(store.entries("q")) == 1
    a.stop(signal.SIGTERM)
    assert store.entries("q") == []


@ETCD_ONLY
def test_bad_arguments_fail_before_any_io(store: Store, tmp_path: Path) -> None:
    for args in (
        ["--listen", "nowhere"],
        ["--token-file", str(tmp_path / "missing-dir" / "t")],
        ["--permits", "2"],
    ):
        result = cli("hold", "x", "-c", "1", "--url", store.url, *args)
        assert result.returncode == 64, (args, result.stderr)
        assert_one_line_error(result)
    assert not store.stored("x")


@ETCD_ONLY
def test_exporter_serves_the_store_wide_view(store: Store, hold: Hold, spawn: Spawner) -> None:
    a = hold(store.url, "ex", "-c", "2", "-p", "2")
    a.wait_state("held")
    b = hold(store.url, "ex", "-c", "2")
    b.wait_state("waiting")
    exporter = Sidecar(
        spawn(
            "exporter",
            "ex",
            "none",
            "--url",
            store.url,
            "--listen",
            "127.0.0.1:0",
            "--min-interval",
            "0",
        )
    )
    m = exporter.metrics()
    assert sample(m, "semaphore_recipes_capacity", semaphore="ex") == 2
    assert sample(m, "semaphore_recipes_permits_in_use", semaphore="ex") == 2
    assert sample(m, "semaphore_recipes_holders", semaphore="ex") == 1
    assert sample(m, "semaphore_recipes_queue_length", semaphore="ex") == 1
    assert sample(m, "semaphore_recipes_oldest_waiter_age_seconds", semaphore="ex") > 0
    assert sample(m, "semaphore_recipes_status_up", semaphore="ex") == 1
    assert sample(m, "semaphore_recipes_status_up", semaphore="none") == 0
    assert exporter.get("/healthz")[0] == 200
    a.spawned.proc.send_signal(signal.SIGTERM)
    b.wait_state("held")
    m = exporter.metrics()
    assert sample(m, "semaphore_recipes_permits_in_use", semaphore="ex") == 1
    assert sample(m, "semaphore_recipes_queue_length", semaphore="ex") == 0
    for p in (exporter, b):
        p.stop(signal.SIGTERM)


HOLD_IN_MEMORY = ["hold", "m", "-c", "1", "--url", "memory://m", "--listen", "127.0.0.1:0"]
_WITHOUT_PROMETHEUS = (
    "import sys; sys.modules['prometheus_client'] = None; "
    "from semaphore_recipes.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_without_the_metrics_extra_metrics_answer_501_and_the_rest_works(
    tmp_path: Path,
) -> None:
    """(memory://: the store lives in the sidecar's own process, which is all it needs)"""
    import subprocess
    import sys

    from .conftest import clean_env

    err = tmp_path / "err"
    with err.open("wb") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-c", _WITHOUT_PROMETHEUS, *HOLD_IN_MEMORY],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=fe,
            env=clean_env(),
        )
    s = Sidecar(Spawned(proc, tmp_path / "out", err))
    try:
        s.wait_state("held")
        code, text = s.get("/metrics")
        assert code == 501 and "semaphore-recipes[metrics]" in text
        assert s.get("/healthz")[0] == 200
        s.stop(signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
