"""``semaphore-recipes hold NAME --capacity N``: the sidecar that holds a permit.

Serves ``--listen HOST:PORT`` from the start: ``/healthz`` (the process and its session
are alive), ``/readyz`` (200 only while the permit is HELD), ``/metrics`` (Prometheus;
501 without the ``[metrics]`` extra) and ``/status`` (JSON: this holder and the
semaphore's holders and waiters). It waits in FIFO order for the permits, writes the
token to ``--token-file`` (atomically: a rename), and holds them until SIGTERM or
SIGINT, then releases them (one round trip, within the request timeout) and exits 0.

Connection loss: while waiting, the wait goes on. While holding, a lost connection
makes the permit SUSPENDED: ``/readyz`` answers 503 until the same session is back
(then 200 again); ``/healthz`` stays 200. When the permit is *lost* (the session or
lease ended, or the entry was deleted) the token file is removed and ``--on-lost``
decides: ``exit`` (default) releases what is left and exits 76, so that the container
is restarted and queues again; ``unready`` stays up with ``/readyz`` at 503 for good.
``/healthz`` answers 503 only once the client can never reach the store again (failed
or closed): an expired session is replaced by a new one. docs/kubernetes.md has the
pod's life around it.

Revocation (``semaphore-recipes revoke``): when a revoke request reaches the permit,
``/readyz`` answers 503 (``revoked``) and the token file is removed at once; ``--grace``
seconds later (time for the app to see it unready) the permits are released and
``hold`` exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from ..backend import SessionState
from ..client import Client
from ..instrumentation import Instrumentation
from ..semaphore import Permit, PermitState, Semaphore
from ._common import (
    CliError,
    ExitCode,
    check_name,
    connect,
    describe_url,
    resolve_url,
    say,
    status_json,
)
from ._http import ProbeServer, Reply, add_listen_argument, metrics_route, parse_listen
from .run import (
    DEFAULT_GRACE,
    add_semaphore_arguments,
    check_permits,
    non_negative_float,
    open_semaphore,
    slot_env,
)

DEFAULT_LISTEN = "0.0.0.0:8479"
POLL = 0.05  # seconds between checks of the permit and of the stop signal
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class OnLost(enum.Enum):
    EXIT = "exit"
    UNREADY = "unready"


class Phase(enum.Enum):
    """Where the sidecar is (``/status``'s ``state``, with the permit's own states)."""

    CONNECTING = "connecting"
    WAITING = "waiting"
    HELD = "held"
    SUSPENDED = "suspended"
    LOST = "lost"
    REVOKED = "revoked"  # a revoke request came: unready, releasing after --grace
    STOPPING = "stopping"


DEAD_SESSIONS = (SessionState.FAILED, SessionState.CLOSED)  # (EXPIRED: a new one comes)


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "hold",
        parents=parents,
        help="sidecar: hold permits until SIGTERM, with probes, metrics and a token file",
        description="Wait in FIFO order for PERMITS permits of NAME and hold them until "
        "SIGTERM/SIGINT. Serves /healthz, /readyz (200 while held), /metrics and /status "
        "on --listen. docs/kubernetes.md shows it as a Kubernetes sidecar.",
    )
    add_semaphore_arguments(p)
    add_listen_argument(p, DEFAULT_LISTEN, "the probes and metrics")
    p.add_argument(
        "--token-file",
        metavar="PATH",
        help="write SEMAPHORE_RECIPES_TOKEN=... (and NAME, PERMITS, KEY, OWNER) here while held",
    )
    p.add_argument(
        "--on-lost",
        choices=[m.value for m in OnLost],
        default=OnLost.EXIT.value,
        help="when the permit is lost: exit 76 (exit, default) or stay up unready (unready)",
    )
    p.add_argument(
        "--grace",
        type=non_negative_float,
        default=DEFAULT_GRACE,
        metavar="S",
        help="when the permit is revoked: seconds unready before releasing and exiting 0 "
        f"(default {DEFAULT_GRACE:g})",
    )
    p.set_defaults(handler=cmd_hold)


class TokenFile:
    """The token file: written whole by a rename, removed when the permit is not held."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def check(self) -> None:
        """Before any I/O: its directory must exist (a volume not mounted is a usage error)."""
        if self.path is not None and not self.path.parent.is_dir():
            raise CliError(ExitCode.USAGE, f"--token-file: no directory {self.path.parent}")

    def write(self, permit: Permit) -> None:
        if self.path is None:
            return
        lines = {
            "SEMAPHORE_RECIPES_TOKEN": permit.token,
            "SEMAPHORE_RECIPES_NAME": permit.semaphore.name,
            "SEMAPHORE_RECIPES_PERMITS": permit.permits,
            "SEMAPHORE_RECIPES_KEY": permit.key,
            "SEMAPHORE_RECIPES_OWNER": permit.owner,
            **(slot_env(permit) if permit.slots else {}),
        }
        text = "".join(f"{k}={v}\n" for k, v in lines.items())
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # the app container may run as another user
        os.replace(tmp, self.path)

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


class Sidecar:
    """What the HTTP routes read: the backend, the semaphore, the permit, the phase."""

    def __init__(self, name: str, permits: int) -> None:
        self.name = name
        self.permits = permits
        self.phase = Phase.CONNECTING
        self.backend: Client | None = None
        self.semaphore: Semaphore | None = None
        self.permit: Permit | None = None

    def current(self) -> Phase:
        permit = self.permit
        if permit is None or self.phase in (Phase.STOPPING, Phase.LOST, Phase.REVOKED):
            return self.phase
        state = permit.state
        if state is PermitState.HELD:
            return Phase.HELD
        if state is PermitState.SUSPENDED:
            return Phase.SUSPENDED
        return Phase.LOST

    def session(self) -> SessionState | None:
        return None if self.backend is None else self.backend.session_state

    # -- the routes --
    def healthz(self) -> Reply:
        session = self.session()
        lost_session = session in DEAD_SESSIONS
        text = f"{self.current().value}; session {session.value if session else 'connecting'}"
        return Reply.text(503 if lost_session else 200, text)

    def readyz(self) -> Reply:
        phase = self.current()
        if phase is Phase.HELD and self.permit is not None:
            return Reply.text(200, f"held: {self.permit.permits} of {self.name!r}")
        return Reply.text(503, f"not held: {phase.value}")

    def status(self) -> Reply:
        permit, sem = self.permit, self.semaphore
        session = self.session()
        doc: dict[str, Any] = {
            "name": self.name,
            "state": self.current().value,
            "session": session.value if session else None,
            "permits": self.permits,
            "token": None if permit is None else permit.token,
            "key": None if permit is None else permit.key,
            "slots": [] if permit is None else [s.index for s in permit.slots],
            "slot_tokens": [] if permit is None else [s.token for s in permit.slots],
            "owner": None if self.backend is None else self.backend.owner,
            "semaphore": None,
            "error": None,
        }
        if sem is not None:
            try:
                doc["semaphore"] = status_json(sem.status())
            except Exception as exc:  # the store unreachable: say so, keep answering
                doc["error"] = f"{type(exc).__name__}: {exc}"
        return Reply.json(200, doc)


def cmd_hold(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    check_permits(args)
    url, parsed = resolve_url(args.url)
    host, port = parse_listen(args.listen)
    token_file = TokenFile(Path(args.token_file) if args.token_file else None)
    token_file.check()
    on_lost = OnLost(args.on_lost)
    token_file.remove()  # a token left by a predecessor that was killed is not ours

    sidecar = Sidecar(name, args.permits)
    registry, instrumentation = _metrics()
    server = ProbeServer(
        host,
        port,
        {
            "/healthz": sidecar.healthz,
            "/readyz": sidecar.readyz,
            "/status": sidecar.status,
            "/metrics": metrics_route(registry),
        },
    ).start()
    say(f"hold: listening on http://{server.address}")
    stop = threading.Event()
    received: list[int] = []

    def while_waiting(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        raise KeyboardInterrupt  # the acquire removes its queue entry on the way out

    def while_holding(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    saved = {sig: signal.signal(sig, while_waiting) for sig in STOP_SIGNALS}
    try:
        try:
            sidecar.backend = connect(url)
            if instrumentation is not None:
                sidecar.backend.instrument(instrumentation)
            sem = open_semaphore(sidecar.backend, name, args)
            sidecar.semaphore = sem
            sidecar.phase = Phase.WAITING
            say(f"hold: waiting for {args.permits} of {name!r} at {describe_url(parsed)}")
            started = time.monotonic()
            permit = sem.acquire(args.permits, watch_entry=True, slot=args.slot)
        except KeyboardInterrupt:
            sig = signal.Signals(received[-1] if received else signal.SIGINT)
            say(f"hold: {sig.name} while waiting for {name!r}: left the queue")
            return 0
        for sig in STOP_SIGNALS:
            signal.signal(sig, while_holding)
        try:
            token_file.write(permit)  # before /readyz says 200: the app reads it then
        except BaseException:
            permit.release()
            raise
        sidecar.permit = permit
        sidecar.phase = Phase.HELD
        say(
            f"hold: holding {permit.permits} of {sem.capacity} permit(s) of {name!r}, "
            f"token {permit.token}, after {time.monotonic() - started:.2f} s"
        )
        return _hold(sidecar, permit, stop, token_file, on_lost, args.grace)
    finally:
        # (a permit granted as a signal came, before it was stored above, goes with
        # the session that close() ends)
        sidecar.phase = Phase.STOPPING
        if sidecar.permit is not None:
            token_file.remove()
            lost = sidecar.permit.lost.is_set()
            sidecar.permit.release()
            say(f"hold: lost {name!r}: nothing to release" if lost else f"hold: released {name!r}")
        if sidecar.backend is not None:
            sidecar.backend.close()
        server.close()
        for sig, previous in saved.items():
            signal.signal(sig, previous)


def _hold(
    sidecar: Sidecar,
    permit: Permit,
    stop: threading.Event,
    token_file: TokenFile,
    on_lost: OnLost,
    grace: float,
) -> int:
    """Until a stop signal, or ``grace`` seconds after a revoke request; returns the
    exit status."""
    state = PermitState.HELD
    lost = False
    release_at: float | None = None
    while not stop.is_set():
        if release_at is None and not lost and permit.revoke_requested.is_set():
            sidecar.phase = Phase.REVOKED  # /readyz: 503 from now on
            token_file.remove()
            release_at = time.monotonic() + grace
            say(f"hold: permit of {sidecar.name!r} revoked: unready, releasing in {grace:g} s")
        if release_at is not None and time.monotonic() >= release_at:
            return 0  # (the caller releases)
        if not lost and permit.lost.is_set():
            lost = True
            token_file.remove()
            if on_lost is OnLost.EXIT:
                say(f"hold: permit of {sidecar.name!r} lost: exiting {int(ExitCode.PERMIT_LOST)}")
                return int(ExitCode.PERMIT_LOST)
            sidecar.phase = Phase.LOST
            say(f"hold: permit of {sidecar.name!r} lost: not ready until restarted")
        elif not lost:
            current = permit.state
            if current is PermitState.HELD and state is PermitState.SUSPENDED:
                say(f"hold: connection back: the permit of {sidecar.name!r} is held again")
            state = current
        (stop if lost else permit.lost).wait(POLL)
    return 0


def _metrics() -> tuple[Any, Instrumentation | None]:
    """The sidecar's own registry and the instrumentation feeding it; (None, None)
    without the ``[metrics]`` extra (``/metrics`` then answers 501)."""
    try:
        from prometheus_client import CollectorRegistry

        from ..prometheus import PrometheusMetrics
    except ImportError:
        say("hold: prometheus_client is not installed: /metrics answers 501")
        return None, None
    registry = CollectorRegistry()
    return registry, PrometheusMetrics(registry)
