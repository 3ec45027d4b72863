"""``semaphore-recipes demo``: the guarantees, shown live with real processes.

Without ``--url`` it starts a throwaway local etcd (see ``dev-server``) and removes it at
the end; with ``--url`` it runs against that server (etcd or ZooKeeper), under fresh
semaphore names (``demo-<id>-...``) that it deletes when it ends. Three scenes, each with
separate worker processes (``python -m semaphore_recipes.cli._demo_worker``):

1. FIFO: six workers, weights 1 1 2 1 3 1, capacity 3: granted in arrival order, a
   large request at the head blocks smaller ones behind it (no overtaking).
2. Crash release: a holder with a 2 s session is killed with SIGKILL; its permit comes
   back when its session/lease runs out on the server.
3. Fencing: a holder paused with SIGSTOP past its lease resumes and writes with its old
   permit through ``permit.transaction()``; the store rejects the write.

Exit status 0 when every scene showed what it should, 1 if a check failed, 69 when no
server can be started or reached, 130 on Ctrl-C (143 on SIGTERM). It takes about 15-25 s. Connection
loss to the server during the demo makes the waiting scene fail after its timeout.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import heapq
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlencode

from ..client import Client
from ..devtools.dev_server import DevServer
from ..semaphore import Semaphore
from ._common import ENV_URL, CliError, ExitCode, describe_url, resolve_url, status_table

SESSION = 2  # seconds: the session timeout / lease TTL of the workers that crash or pause
WAIT = 30.0  # seconds any single step may take before the demo gives up


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        parents=parents,
        help="show FIFO, crash release and fencing live (starts its own etcd)",
        description="Run worker processes against a semaphore and show, live: FIFO "
        "grants with weights, a killed holder's permit coming back, and a paused "
        "holder's fenced write being rejected. Without --url (SEMAPHORE_RECIPES_URL is "
        "not used here) it starts a throwaway local etcd.",
    )
    p.set_defaults(handler=cmd_demo)


class DemoFailed(Exception):
    pass


@dataclass
class Scene:
    name: str
    semaphore: str
    capacity: int
    track: bool = False  # show the permits in use after each grant/release
    in_use: int = 0
    max_in_use: int = 0


@dataclass
class Worker:
    label: str
    scene: Scene
    permits: int
    proc: subprocess.Popen[str]
    docs: list[dict[str, Any]] = field(default_factory=list)
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    owner: str = ""

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()

    def first(self, *events: str, start: int = 0) -> dict[str, Any] | None:
        return next((d for d in self.docs[start:] if d["event"] in events), None)

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)


def with_param(url: str, key: str, value: str) -> str:
    base, _, query = url.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    params[key] = value
    return f"{base}?{urlencode(params)}"


class Demo:
    def __init__(self, url: str, out: TextIO) -> None:
        self.url = url
        self.out = out
        self.color = out.isatty() and not os.environ.get("NO_COLOR")
        self.run_id = uuid.uuid4().hex[:6]
        self.inbox: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.pending: list[tuple[float, int, float, str, dict[str, Any]]] = []
        self.seq = itertools.count()
        self.workers: dict[str, Worker] = {}
        self.observer: Client | None = None
        self.created: list[str] = []
        self.results: list[tuple[str, bool, str]] = []
        self.started = time.monotonic()

    # ---- output ------------------------------------------------------------------
    def _style(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def _stamp(self, t: float) -> str:
        wall = time.time() - (time.monotonic() - t)
        return time.strftime("%H:%M:%S", time.localtime(wall)) + f".{int(wall * 1000) % 1000:03d}"

    def line(self, who: str, text: str, t: float | None = None) -> None:
        if t is None:  # a line of the demo itself: after every worker line read so far
            self.catch_up()
            t = time.monotonic()
        print(f"{self._stamp(t)}  {who:<2}  {text}", file=self.out, flush=True)

    def note(self, text: str) -> None:
        self.line(">>", text)

    def header(self, text: str) -> None:
        self.catch_up()
        print(file=self.out)
        print(self._style(f"== {text}", "1"), file=self.out, flush=True)

    def table(self, sem: Any, caption: str) -> None:
        self.catch_up()
        print(f"{'':14}{caption}", file=self.out)
        for row in status_table(sem.status()):
            print(f"{'':16}{row}", file=self.out)
        self.out.flush()

    # ---- workers -----------------------------------------------------------------
    def start_worker(
        self, label: str, scene: Scene, permits: int, mode: str, hold: float, short: bool
    ) -> Worker:
        url = with_param(self.url, "session_timeout", str(SESSION)) if short else self.url
        cfg = {
            "name": scene.semaphore,
            "capacity": scene.capacity,
            "label": label,
            "permits": permits,
            "mode": mode,
            "hold": hold,
            "resource": self.resource(scene.semaphore),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "semaphore_recipes.cli._demo_worker", json.dumps(cfg)],
            # the URL (it may hold a password) in the environment, not the command line
            # every user of the machine can read
            env={**os.environ, ENV_URL: url},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        worker = Worker(label, scene, permits, proc)
        self.workers[label] = worker
        threading.Thread(target=self._read_stdout, args=(worker,), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(worker,), daemon=True).start()
        return worker

    def _read_stdout(self, worker: Worker) -> None:
        assert worker.proc.stdout is not None
        for raw in worker.proc.stdout:
            try:
                doc = json.loads(raw)
            except ValueError:
                worker.stderr.append(raw.rstrip())
                continue
            self.inbox.put((worker.label, doc))
        self.inbox.put((worker.label, {"event": "exit", "t": time.monotonic()}))

    def _read_stderr(self, worker: Worker) -> None:
        assert worker.proc.stderr is not None
        for raw in worker.proc.stderr:
            worker.stderr.append(raw.rstrip())

    def pump(self, timeout: float) -> None:
        """Take the workers' lines that arrive within ``timeout``; show them in time order."""
        try:
            label, doc = self.inbox.get(timeout=timeout)
        except queue.Empty:
            self.flush(force=False)
            return
        self._take(label, doc)
        self.flush(force=False)

    def catch_up(self) -> None:
        """Show every worker line received so far."""
        while True:
            try:
                label, doc = self.inbox.get_nowait()
            except queue.Empty:
                break
            self._take(label, doc)
        self.flush(force=True)

    def _take(self, label: str, doc: dict[str, Any]) -> None:
        worker = self.workers[label]
        worker.docs.append(doc)
        if doc["event"] == "ready":
            worker.owner = doc["owner"]
        heapq.heappush(self.pending, (doc["t"], next(self.seq), time.monotonic(), label, doc))

    def flush(self, *, force: bool) -> None:
        # a line is shown once it is 0.1 s old, so lines of other workers that happened
        # earlier but were read later still come first
        while self.pending:
            _, _, arrived, label, doc = self.pending[0]
            if not force and time.monotonic() - arrived < 0.1:
                return
            heapq.heappop(self.pending)
            self._show(self.workers[label], doc)

    def _show(self, w: Worker, doc: dict[str, Any]) -> None:
        event, sc = doc["event"], w.scene
        usage = ""
        if event == "granted":
            if sc.track:
                sc.in_use += w.permits
                sc.max_in_use = max(sc.max_in_use, sc.in_use)
                usage = f"   [{sc.in_use}/{sc.capacity} in use]"
            waited = doc["waited"]
            how = "at once" if waited < 0.1 else f"after waiting {waited:.2f} s"
            self.line(
                w.label,
                f"granted {_permits(w.permits)} {how} (fencing token {doc['token']}){usage}",
                doc["t"],
            )
        elif event == "releasing" and doc.get("state") == "lost":
            self.line(w.label, "its permit is lost already: release() has nothing to do", doc["t"])
        elif event == "releasing":
            if sc.track:
                sc.in_use -= w.permits
                usage = f"   [{sc.in_use}/{sc.capacity} in use]"
            self.line(w.label, f"releases {_permits(w.permits)}{usage}", doc["t"])
        elif event == "write-ok":
            self.line(w.label, f"fenced write with token {doc['token']}: accepted", doc["t"])
        elif event == "write-rejected":
            self.line(
                w.label,
                f"fenced write with token {doc['token']}: "
                + self._style("REJECTED", "1")
                + f" by the store ({doc['error']})",
                doc["t"],
            )

    def wait_event(
        self, label: str, *events: str, timeout: float = WAIT, start: int = 0
    ) -> dict[str, Any]:
        """The first of ``events`` from worker ``label`` (among its lines from ``start``)."""
        worker = self.workers[label]
        deadline = time.monotonic() + timeout
        while True:
            doc = worker.first(*events, start=start)
            if doc is not None:
                self.catch_up()
                return doc
            if worker.first("exit") is not None:
                raise DemoFailed(
                    f"worker {label} exited (status {worker.proc.wait()}) before "
                    f"{'/'.join(events)}: " + " | ".join(worker.stderr)
                )
            if time.monotonic() > deadline:
                raise DemoFailed(f"worker {label}: no {'/'.join(events)} within {timeout:g} s")
            self.pump(0.02)

    def wait_enqueued(self, sem: Any, label: str) -> tuple[str, Any]:
        """Poll the status until ``label``'s entry is in the queue: ("holding"|"waiting", st)."""
        worker = self.workers[label]
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            st = sem.status()
            if any(e.owner == worker.owner for e in st.holders):
                return "holding", st
            if any(e.owner == worker.owner for e in st.waiters):
                return "waiting", st
            if worker.first("granted") is not None:
                return "holding", st
            self.pump(0.01)
        raise DemoFailed(f"worker {label} never showed up in the queue")

    def label_of(self, owner: str) -> str:
        return next((w.label for w in self.workers.values() if w.owner == owner), owner)

    # ---- the store -----------------------------------------------------------------
    @property
    def store(self) -> Client:
        assert self.observer is not None, "connected in _run()"
        return self.observer

    def resource(self, name: str) -> str:
        """Where scene 3 writes: a data key kept with the semaphore, removed with it."""
        return self.store.data_key(name, "resource")

    def semaphore(self, name: str, capacity: int) -> Semaphore:
        sem = self.store.semaphore(name, capacity)
        self.created.append(name)
        return sem

    def read_resource(self, name: str) -> str:
        raw = self.store.read(self.resource(name)) or b""
        return raw.decode(errors="replace")

    def prepare_resource(self, name: str) -> None:
        """Create the resource (the workers' fenced writes replace it): fenced too."""
        sem = self.store.semaphore(name, create=False)
        with sem.acquire(timeout=10) as permit:
            permit.transaction().create(self.resource(name), b"(nothing written yet)").commit()

    def remove_semaphores(self) -> None:
        for name in self.created:
            with contextlib.suppress(Exception):
                self.store.delete_semaphore(name)

    def stop_workers(self) -> None:
        for w in self.workers.values():
            if w.proc.poll() is None:
                w.signal(signal.SIGCONT)
                w.proc.kill()
        for w in self.workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(timeout=5)

    def check(self, scene: str, ok: bool, text: str) -> None:
        self.results.append((scene, ok, text))
        mark = self._style("ok", "32") if ok else self._style("FAILED", "31;1")
        self.note(f"{mark}: {text}")


def _permits(n: int) -> str:
    return f"{n} permit" + ("" if n == 1 else "s")


# ---- the scenes ---------------------------------------------------------------------

FIFO_PLAN = [("A", 1), ("B", 1), ("C", 2), ("D", 1), ("E", 3), ("F", 1)]
FIFO_HOLD = 1.2


def scene_fifo(demo: Demo, sc: Scene, sem: Any) -> None:
    demo.header(
        f"1. FIFO: six workers arrive in the order A B C D E F asking "
        f"{' '.join(str(w) for _, w in FIFO_PLAN)} permits; capacity {sc.capacity}; "
        f"each holds {FIFO_HOLD:g} s"
    )
    for label, permits in FIFO_PLAN:
        demo.workers[label].send("go")
        state, st = demo.wait_enqueued(sem, label)
        if state == "waiting":
            free = max(0, st.capacity - st.used)
            head = st.waiters[0]
            if free >= permits and head.owner != demo.workers[label].owner:
                why = (
                    f"{_permits(free)} free, but {demo.label_of(head.owner)} "
                    f"({_permits(head.permits)}) is ahead of it: no overtaking"
                )
            else:
                why = f"{st.used}/{st.capacity} in use"
            demo.line(label, f"queued for {_permits(permits)}: {why}")
    demo.table(sem, "status once all six are queued (semaphore-recipes status):")
    for label, _ in FIFO_PLAN:
        demo.wait_event(label, "released", timeout=WAIT)
    ok, order, most = fifo_verdict([demo.workers[label].docs for label, _ in FIFO_PLAN])
    sc.max_in_use = most
    expected = [label for label, _ in FIFO_PLAN]
    passed = ok and order == expected and most <= sc.capacity
    if passed:
        how = f"granted in arrival order {' '.join(order)} (weighted, no overtaking)"
    else:
        how = f"granted in the order {' '.join(order)}, arrival order {' '.join(expected)}"
    demo.check("FIFO", passed, f"{how}; at most {most} of {sc.capacity} permits in use at once")


def fifo_verdict(docs: list[list[dict[str, Any]]]) -> tuple[bool, list[str], int]:
    """From the workers' own lines (listed in arrival order): whether no worker was
    granted before one that arrived earlier, the grant order, and the most permits held
    at once.

    A grant is placed by the number of releases reported before it: a later arrival
    granted after fewer releases than an earlier one overtook it. (Comparing grant times
    alone would flag two grants made by one release, which the processes report in any
    order.) Holding is counted from the "granted" line to the "releasing" line, both
    inside the real holding time, so the maximum is never overstated.
    """
    releases = sorted(d["t"] for lines in docs for d in lines if d["event"] == "releasing")
    grants = []
    for arrival, lines in enumerate(docs):
        granted = next((d for d in lines if d["event"] == "granted"), None)
        if granted is None:
            return False, [], 0
        grants.append((bisect.bisect_left(releases, granted["t"]), arrival, granted))
    by_token = sorted(grants, key=lambda g: g[2]["token"])
    arrived_in_order = [g[1] for g in by_token] == list(range(len(docs)))
    no_overtaking = all(a[0] <= b[0] for a, b in itertools.pairwise(by_token))
    order = [FIFO_PLAN[arrival][0] for _, arrival, _ in sorted(grants, key=lambda g: g[:2])]
    changes = sorted(
        (d["t"], 0 if d["event"] == "releasing" else 1, permits)
        for (_, permits), lines in zip(FIFO_PLAN, docs, strict=True)
        for d in lines
        if d["event"] in ("granted", "releasing")
    )
    held = most = 0
    for _, kind, permits in changes:
        held += permits if kind else -permits
        most = max(most, held)
    return arrived_in_order and no_overtaking, order, most


def scene_crash(demo: Demo, sc: Scene, sem: Any) -> None:
    demo.header(
        f"2. Crash release: K holds the only permit (session timeout {SESSION} s), "
        "L waits; K is killed with SIGKILL"
    )
    demo.workers["K"].send("go")
    demo.wait_event("K", "granted")
    demo.workers["L"].send("go")
    state, _ = demo.wait_enqueued(sem, "L")
    if state == "waiting":
        demo.line("L", "queued for 1 permit: K holds it")
    killed = time.monotonic()
    demo.workers["K"].signal(signal.SIGKILL)
    demo.note(
        f"SIGKILL to K (pid {demo.workers['K'].proc.pid}): it cannot release anything; "
        f"its entry stays until its session ({SESSION} s) runs out on the server"
    )
    demo.table(sem, "status right after the kill: K still counts as a holder")
    granted = demo.wait_event("L", "granted")
    delay = granted["t"] - killed
    demo.note(f"K's permit came back by itself {delay:.1f} s after the kill; L has it now")
    demo.wait_event("L", "released")
    demo.check(
        "crash release",
        True,
        f"the killed holder's permit came back {delay:.1f} s after SIGKILL "
        f"(session timeout {SESSION} s)",
    )


def scene_fencing(demo: Demo, sc: Scene, sem: Any) -> None:
    demo.header(
        f"3. Fencing: P holds the permit (session timeout {SESSION} s) and writes a "
        "resource through permit.transaction(); P is paused (SIGSTOP) past its lease"
    )
    demo.workers["P"].send("go")
    p_ok = demo.wait_event("P", "write-ok")
    demo.workers["Q"].send("go")
    state, _ = demo.wait_enqueued(sem, "Q")
    if state == "waiting":
        demo.line("Q", "queued for 1 permit: P holds it")
    paused = time.monotonic()
    demo.workers["P"].signal(signal.SIGSTOP)
    demo.note(
        "SIGSTOP to P, like a long GC pause or a frozen VM: P still believes it holds "
        "the permit, but its session keepalives stop"
    )
    q_granted = demo.wait_event("Q", "granted")
    demo.note(
        f"P's session ran out on the server {q_granted['t'] - paused:.1f} s into the pause: "
        "Q was granted the permit"
    )
    q_ok = demo.wait_event("Q", "write-ok")
    mark = len(demo.workers["P"].docs)
    demo.workers["P"].send("write")
    demo.workers["P"].signal(signal.SIGCONT)
    demo.note("SIGCONT to P: it resumes and at once writes again with its old permit")
    p_again = demo.wait_event("P", "write-rejected", "write-ok", start=mark)
    if p_again["event"] == "write-rejected" and p_again["lost_seen"]:
        demo.note(
            "P's permit.lost was already set as it wrote (its watch fired on resuming), but "
            "a check before a write always leaves a gap: the fence in the store closes it"
        )
    elif p_again["event"] == "write-rejected":
        demo.note("P had not noticed the loss yet (permit.lost unset): only the fence stopped it")
    value = demo.read_resource(sc.semaphore)
    demo.note(f"the resource now reads: {value!r}")
    demo.workers["Q"].send("release")
    demo.workers["P"].send("release")
    demo.wait_event("Q", "released")
    demo.wait_event("P", "released")
    ok = p_again["event"] == "write-rejected" and f"token {q_ok['token']}" in value
    demo.check(
        "fencing",
        ok,
        f"the paused holder's write (token {p_ok['token']}) was rejected; the resource "
        f"keeps the write of the current holder (token {q_ok['token']})",
    )


_interrupted_by: list[int] = []


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    _interrupted_by.append(signum)
    raise KeyboardInterrupt


def cmd_demo(args: argparse.Namespace, command: list[str]) -> int:
    signal.signal(signal.SIGTERM, _raise_interrupt)
    out = sys.stdout
    dev: DevServer | None = None
    demo: Demo | None = None
    try:
        if args.url is None:
            from .devserver import start_dev_server

            dev = start_dev_server("etcd", None)
            url, parsed = resolve_url(f"{dev.url}/demo")
            print(
                f"started a throwaway {dev.description} (removed at the end; "
                "`--url` runs the demo on your own server)",
                file=out,
                flush=True,
            )
        else:
            url, parsed = resolve_url(args.url)
            print(f"running against {describe_url(parsed)}", file=out, flush=True)
        demo = Demo(url, out)
        return _run(demo)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=out, flush=True)
        return 128 + (_interrupted_by[0] if _interrupted_by else signal.SIGINT)
    except DemoFailed as exc:
        raise CliError(ExitCode.DEMO_FAILED, f"demo failed: {exc}") from None
    finally:
        with _no_interrupts():
            if demo is not None:
                demo.stop_workers()
                if demo.observer is not None:
                    if dev is None:
                        demo.remove_semaphores()
                    demo.observer.close()
            if dev is not None:
                dev.close()


def _run(demo: Demo) -> int:
    from .. import connect

    demo.observer = connect(demo.url, owner="demo")
    rid = demo.run_id
    fifo = Scene("FIFO", f"demo-{rid}-fifo", 3, track=True)
    crash = Scene("crash", f"demo-{rid}-crash", 1)
    fence = Scene("fencing", f"demo-{rid}-fencing", 1)
    sems = {sc.name: demo.semaphore(sc.semaphore, sc.capacity) for sc in (fifo, crash, fence)}
    demo.prepare_resource(fence.semaphore)
    for label, permits in FIFO_PLAN:
        demo.start_worker(label, fifo, permits, "hold", FIFO_HOLD, short=False)
    demo.start_worker("K", crash, 1, "hold", -1, short=True)
    demo.start_worker("L", crash, 1, "hold", 0.3, short=False)
    demo.start_worker("P", fence, 1, "fence", 0, short=True)
    demo.start_worker("Q", fence, 1, "fence", 0, short=False)
    for label in demo.workers:
        demo.wait_event(label, "ready", timeout=60.0)
    print(
        f"{len(demo.workers)} worker processes connected to {describe_url_of(demo.url)}; "
        "each line: time, worker, what happened (>> marks what the demo does)",
        file=demo.out,
        flush=True,
    )
    scene_fifo(demo, fifo, sems["FIFO"])
    scene_crash(demo, crash, sems["crash"])
    scene_fencing(demo, fence, sems["fencing"])
    demo.header("Summary")
    for scene, ok, text in demo.results:
        mark = demo._style("ok", "32") if ok else demo._style("FAILED", "31;1")
        print(f"  {scene:<14} {mark:<6} {text}", file=demo.out)
    passed = all(ok for _, ok, _ in demo.results)
    took = time.monotonic() - demo.started
    print(
        f"demo {'finished' if passed else 'FAILED'} in {took:.1f} s",
        file=demo.out,
        flush=True,
    )
    return 0 if passed else int(ExitCode.DEMO_FAILED)


def describe_url_of(url: str) -> str:
    return describe_url(resolve_url(url)[1])


@contextlib.contextmanager
def _no_interrupts() -> Any:
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)
