"""One chaos run: cluster, clients, nemesis, capacity changes, then the history check."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import semaphore_recipes as sr

from .checker import END, QUIESCED, CheckParams, CheckResult, check
from .client import CALL_MARGIN, OpLog, classify
from .cluster import TestCluster, make_cluster
from .cluster_redis_sentinel import RedisSentinelTestCluster
from .fleet import ClientSlot, read_ops, wait_until
from .layout import SEMAPHORE
from .leaders import LOG_NAME, LeaderWatch, read_changes, spontaneous
from .model import (
    CapacitySet,
    ClientOp,
    DeleteCause,
    EntryCreated,
    EntryDeleted,
    EntryGranted,
    Fault,
    FaultKind,
    FencedWrite,
    HistoryEvent,
    LeaderChange,
    Marker,
    OpKind,
    Outcome,
    Violation,
    ViolationKind,
)
from .nemesis import Nemesis
from .storm import Storm
from .timeouts import REQUEST_TIMEOUT

CAPACITIES = (3, 4, 5, 6)  # never below the largest weight (3)


@dataclass(frozen=True)
class RunConfig:
    backend: str
    seconds: float
    seed: str
    clients: int = 5
    threads: int = 3
    session_timeout: float = 2.0
    fault_interval: tuple[float, float] = (0.5, 2.0)
    workdir: Path | None = None
    keep: bool = False
    mutation: str | None = None  # a deliberate bug in the clients (chaos.client.MUTATIONS)
    storm: bool = False  # overlapping faults on client slots (chaos.storm) or one at a time
    wait_replicas: int = 1  # redis-sentinel: the clients' URL parameter


@dataclass
class RunReport:
    config: RunConfig
    result: CheckResult
    faults: list[Fault]
    ops: list[ClientOp]
    elapsed: float
    rundir: Path
    notes: list[str] = field(default_factory=list)
    leader_changes: list[LeaderChange] = field(default_factory=list)  # every election seen
    # redis-sentinel: failovers, and the commands the new primaries lacked, by kind
    failovers: int = 0
    lost_with_primary: Counter[str] = field(default_factory=Counter)

    @property
    def spontaneous_leader_changes(self) -> list[LeaderChange]:
        """The elections no injected fault explains (chaos/leaders.py)."""
        return spontaneous(self.leader_changes, self.faults)

    @property
    def acquisitions(self) -> int:
        return self.result.grants

    @property
    def violations(self) -> list[Violation]:
        return self.result.violations

    def summary(self) -> dict[str, Any]:
        return {
            "backend": self.config.backend,
            "seed": self.config.seed,
            "seconds": round(self.elapsed, 1),
            "acquisitions": self.acquisitions,
            "fenced_writes": self.result.fenced_writes,
            "faults": dict(Counter(f.kind.value for f in self.faults)),
            "leader_changes": len(self.leader_changes),
            "failovers": self.failovers,
            "lost_with_primary": dict(self.lost_with_primary),
            "spontaneous_leader_changes": [
                f"{c.old_leader} (term {c.old_term}) -> {c.new_leader} (term {c.new_term}) "
                f"between {c.start:.3f} and {c.end:.3f}"
                for c in self.spontaneous_leader_changes
            ],
            "violations": dict(self.result.by_kind()),
            "release_latencies": [round(x, 3) for x in self.result.release_latencies],
            "notes": self.notes,
            "details": [f"{v.kind.value}: {v.detail}" for v in self.violations[:50]],
        }


class _Admin:
    """Capacity changes through the library (as an operator would), logged like a client."""

    def __init__(self, cluster: TestCluster, rundir: Path, seed: str) -> None:
        self.cluster = cluster
        self.rng = random.Random(f"admin/{seed}")
        self.log = OpLog(str(rundir / "ops-admin.jsonl"), "admin")
        self.stopping = threading.Event()
        hosts = [cluster.endpoint(m) for m in cluster.members]
        self.backend = sr.connect(cluster.url(hosts), owner="admin")
        self.sem = self.backend.semaphore(SEMAPHORE, capacity=4, adopt_capacity=True)
        self._threads = [
            threading.Thread(target=self._capacity_loop, name="admin", daemon=True),
            threading.Thread(target=self._clock_loop, name="clock", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _capacity_loop(self) -> None:
        while not self.stopping.wait(self.rng.uniform(1.0, 4.0)):
            capacity = self.rng.choice(CAPACITIES)
            op = self.log.start(0, OpKind.SET_CAPACITY, 2.0 + 30.0 + CALL_MARGIN)
            try:
                self.sem.set_capacity(capacity)
                self.log.end(op, Outcome.OK, detail=str(capacity))
            except Exception as exc:
                self.log.end(op, classify(exc), detail=repr(exc)[:300])

    def _clock_loop(self) -> None:
        while not self.stopping.wait(0.2):
            with contextlib.suppress(Exception):
                self.cluster.tick()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            if thread.ident is not None:  # started
                thread.join(60)
        with contextlib.suppress(Exception):
            self.backend.close()


def run_once(config: RunConfig, echo: Any = print) -> RunReport:
    rundir = Path(tempfile.mkdtemp(prefix=f"chaos-{config.backend}-", dir=config.workdir))
    started = time.time()
    cluster = make_cluster(
        config.backend, rundir, config.session_timeout, wait_replicas=config.wait_replicas
    )
    slots: list[ClientSlot] = []
    admin: _Admin | None = None
    nemesis: Nemesis | Storm | None = None
    watch: LeaderWatch | None = None
    notes: list[str] = []
    failed = True
    # the admin's client libraries log every fault they see: into the run directory
    log_handler = logging.FileHandler(rundir / "runner.log")
    log_handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.getLogger().addHandler(log_handler)
    try:
        cluster.start()
        # elections the nemesis does not cause are server faults too (chaos/leaders.py)
        watch = LeaderWatch(cluster.member_views, rundir / LOG_NAME)
        watch.start()
        admin = _Admin(cluster, rundir, config.seed)
        request_bound = max(REQUEST_TIMEOUT, config.session_timeout)
        command = ["--backend", config.backend, "--threads", str(config.threads),
                   "--seed", config.seed, "--request-bound", str(request_bound)]  # fmt: skip
        if config.mutation is not None:
            command += ["--mutation", config.mutation]
        upstreams = [cluster.endpoint(m) for m in cluster.members]
        slots = [ClientSlot(i, rundir, upstreams, command) for i in range(config.clients)]

        def spawn(slot: ClientSlot) -> None:
            args = [cluster.url(slot.proxy_addresses)]
            if isinstance(cluster, RedisSentinelTestCluster):  # the sentinels name real nodes
                args = ["--address-map", cluster.address_map(slot.proxy_addresses), *args]
            slot.spawn(args)

        for slot in slots:
            spawn(slot)
        admin.start()
        if config.storm:
            nemesis = Storm(
                cluster, slots, spawn, seed=config.seed, session_timeout=config.session_timeout,
                log_path=rundir / "nemesis.jsonl",
            )  # fmt: skip
        else:
            nemesis = Nemesis(
                cluster, slots, spawn, seed=config.seed, session_timeout=config.session_timeout,
                interval=config.fault_interval, log_path=rundir / "nemesis.jsonl",
            )  # fmt: skip
        nemesis.start()
        mode = "storm" if config.storm else "one fault at a time"
        echo(f"[{config.backend} seed {config.seed}] running {config.seconds:g} s ({mode}) "
             f"in {rundir}")  # fmt: skip
        time.sleep(config.seconds)
        nemesis.stop()
        if nemesis.error is not None:
            raise RuntimeError(f"the nemesis failed: {nemesis.error!r}") from nemesis.error
        cluster.wait_healthy()
        for slot in slots:
            slot.restore_network()
            slot.signal(signal.SIGCONT)
        # the last fault's sessions end within a session timeout; then let clients go idle
        time.sleep(config.session_timeout + 2.0)
        for slot in slots:
            slot.signal(signal.SIGUSR1)
        if not wait_until(lambda: all(s.is_idle() for s in slots), 60.0):
            notes.append("clients not idle after 60 s: " + ", ".join(
                s.owner for s in slots if not s.is_idle()))  # fmt: skip
        time.sleep(1.0)  # deletes that a release hands to a background thread
        admin.stop()
        cluster.mark(QUIESCED)
        for slot in slots:
            if not slot.stop(20.0):
                notes.append(f"{slot.owner} did not exit on SIGTERM within 20 s: killed")
        time.sleep(config.session_timeout + 2.0)
        cluster.mark(END)
        watch.stop()  # before the history: ZooKeeper's is read from stopped members
        if watch.error is not None:
            raise RuntimeError(f"the leader watch failed: {watch.error!r}") from watch.error
        history, problems, leases = cluster.history()
        with (rundir / "history.jsonl").open("w") as out:  # for a post-mortem
            for event in history:
                out.write(json.dumps({"type": type(event).__name__, **_plain(event)}) + "\n")
        ops = read_ops(rundir / "ops-admin.jsonl", "admin")
        for slot in slots:
            for owner in slot.owners:
                ops += read_ops(slot.log_path(owner), owner)
        faults = list(nemesis.faults)
        result = check(
            history, ops, faults, CheckParams(session_timeout=config.session_timeout),
            live_leases=leases, leader_changes=watch.changes,
        )  # fmt: skip
        for problem in problems:
            result.add(ViolationKind.BAD_HISTORY, problem)
        report = RunReport(
            config, result, faults, ops, time.time() - started, rundir, notes, watch.changes
        )
        if isinstance(cluster, RedisSentinelTestCluster):
            failovers = cluster.failover_report
            report.failovers, report.lost_with_primary = failovers.failovers, failovers.lost
            _lost_grants(ops, failovers.lost_grants, result)
        (rundir / "result.json").write_text(json.dumps(report.summary(), indent=1))
        failed = bool(result.violations)
        if failed:
            echo(f"[{config.backend} seed {config.seed}] VIOLATIONS (run dir {rundir}):")
            for line in report.summary()["details"]:
                echo("  " + line)
            echo("server logs:\n" + cluster.log_tail())
        return report
    except BaseException:
        with contextlib.suppress(Exception):
            echo("server logs:\n" + cluster.log_tail())
        raise
    finally:
        if nemesis is not None:
            nemesis.stopping.set()
        if watch is not None:
            watch.stop()  # (idempotent)
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.stop()  # (idempotent) its threads and its session
        for slot in slots:
            with contextlib.suppress(Exception):
                slot.close()
        with contextlib.suppress(Exception):
            cluster.close()
        logging.getLogger().removeHandler(log_handler)
        log_handler.close()
        if not (failed or config.keep):
            shutil.rmtree(rundir, ignore_errors=True)


def _lost_grants(
    ops: list[ClientOp], lost: frozenset[tuple[str, int]], result: CheckResult
) -> None:
    """An acquire that returned its permit while the grant was lost with a killed
    primary (its held mark among the commands the new primary lacked)."""
    for op in ops:
        acknowledged = op.kind is OpKind.ACQUIRE and op.outcome is Outcome.OK
        if acknowledged and (op.key or "", op.token or 0) in lost:
            result.add(
                ViolationKind.LOST_GRANT,
                f"{op.client}/t{op.thread} acquire at {op.start:.3f} got {op.key} "
                f"(token {op.token}); its grant was lost with the killed primary",
            )


_EVENT_TYPES = {
    cls.__name__: cls
    for cls in (EntryCreated, EntryGranted, EntryDeleted, CapacitySet, FencedWrite, Marker)
}


@dataclass(frozen=True)
class KeptRun:
    history: list[HistoryEvent]
    ops: list[ClientOp]
    faults: list[Fault]
    leader_changes: list[LeaderChange]


def load_run(rundir: Path) -> KeptRun:
    """A kept run directory's history, op logs, faults and the elections seen (for
    ``--recheck``)."""
    history: list[HistoryEvent] = []
    for line in (rundir / "history.jsonl").read_text().splitlines():
        doc = json.loads(line)
        cls = _EVENT_TYPES[doc.pop("type")]
        if "cause" in doc:
            doc["cause"] = DeleteCause(doc["cause"])
        history.append(cls(**doc))
    ops: list[ClientOp] = []
    for path in sorted(rundir.glob("ops-*.jsonl")):
        ops += read_ops(path, path.stem.removeprefix("ops-"))
    faults = []
    for line in (rundir / "nemesis.jsonl").read_text().splitlines():
        doc = json.loads(line)
        faults.append(Fault(FaultKind(doc["kind"]), doc["target"], doc["start"], doc["end"]))
    return KeptRun(history, ops, faults, read_changes(rundir))


def _plain(event: Any) -> dict[str, Any]:
    return {k: getattr(v, "value", v) for k, v in dataclasses.asdict(event).items()}


def fault_kinds() -> list[str]:
    """The kinds of fault a nemesis injects (the soak table's rows)."""
    return [k.value for k in FaultKind if k.injected]
