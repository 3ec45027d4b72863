"""``semaphore-recipes run NAME --capacity N -- CMD...``: hold a permit while CMD runs.

Waits its turn in FIFO order, starts CMD with the fencing token in its environment
(``SEMAPHORE_RECIPES_TOKEN``, ``SEMAPHORE_RECIPES_NAME``, ``SEMAPHORE_RECIPES_URL``,
``SEMAPHORE_RECIPES_PERMITS``), and releases the permit when CMD exits. ``--also OTHER:K``
(repeatable) takes K permits of the existing semaphore OTHER too, atomically with NAME's
(``backend.acquire_all``; ``SEMAPHORE_RECIPES_ALSO`` lists them). ``--slot`` takes job
slots with the permits (``acquire(slot=True)``): ``SEMAPHORE_RECIPES_SLOT`` is the slot
index (comma-separated when K > 1), ``SEMAPHORE_RECIPES_SLOT_TOKEN`` their tokens.

Connection loss: while waiting, the wait goes on (a waiter whose session ended enters
the queue again, which the library logs). While CMD runs, a lost connection makes the
permit SUSPENDED (a warning on stderr; CMD keeps running, as the session may still be
alive). When the permit is *lost* (the session or lease ended, or the entry was deleted
or its lease revoked by hand) CMD gets SIGTERM within a second, then SIGKILL after
``--grace`` seconds (``--on-lost=kill``: SIGKILL at once; ``--on-lost=ignore``: a warning
only), and ``run`` exits with 76. A holder cut off from the server learns of the loss when
it reconnects; on ZooKeeper also after a whole session timeout without reconnecting; on
etcd only when it reaches a member again (a new leader may have renewed the lease), so
CMD keeps running SUSPENDED meanwhile: fence its writes with the token when that matters.

Revocation (``semaphore-recipes revoke``): when a revoke request reaches the permit, CMD
gets SIGTERM, then SIGKILL after ``--grace`` seconds; ``run`` releases the permit when
CMD has exited and exits with CMD's status (143 when SIGTERM ended it).

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to ``run`` are
forwarded to CMD, and ``run`` exits when CMD does. A Ctrl-C (SIGINT, SIGQUIT) typed in a
terminal already reaches CMD, which is in the same foreground process group; it is not
sent a second time. Signals ignored when ``run`` started (``nohup``, a background job of
a script) stay ignored, by ``run`` and CMD. A signal while still waiting leaves the queue
and exits 128+N.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..backend import Capability
from ..errors import AcquireTimeout, WouldBlock
from ..semaphore import PermitState
from ._common import ENV_URL, CliError, ExitCode, check_name, connect, resolve_url, say
from ._name_argument import add_name_argument
from ._position_line import PositionLine

FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
KEYBOARD_SIGNALS = (signal.SIGINT, signal.SIGQUIT)
ON_LOST = ("terminate", "kill", "ignore")
DEFAULT_GRACE = 5.0
POLL = 0.05  # seconds between checks of the child and of the permit


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        parents=parents,
        help="wait for a permit (FIFO), run a command while holding it, release",
        description="Wait in FIFO order for PERMITS permits of semaphore NAME, run CMD "
        "while holding them, release when CMD exits. Exits with CMD's status.",
        usage="%(prog)s NAME --capacity N [options] -- CMD [ARGS...]",
    )
    add_semaphore_arguments(p)
    p.add_argument(
        "--timeout",
        "-t",
        type=non_negative_float,
        metavar="S",
        help="give up after S seconds in the queue (exit 75); 0: only if free now",
    )
    p.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="OTHER:K",
        help="also take K permits of the existing semaphore OTHER, atomically with NAME's "
        "(one request creates every entry: no deadlock, whatever the order); repeatable",
    )
    p.add_argument(
        "--on-lost",
        choices=ON_LOST,
        default="terminate",
        help="when the permit is lost while CMD runs: SIGTERM then SIGKILL after "
        "--grace (terminate, default), SIGKILL at once (kill), or only warn (ignore)",
    )
    p.add_argument(
        "--grace",
        type=non_negative_float,
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL, when the permit is revoked or lost "
        f"(with --on-lost=terminate) (default {DEFAULT_GRACE:g})",
    )
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="show nothing while waiting (by default: the place in the queue and the "
        "time waited on stderr, one updating line on a terminal)",
    )
    p.set_defaults(handler=cmd_run, takes_command=True)


def add_semaphore_arguments(p: argparse.ArgumentParser) -> None:
    """NAME, --capacity, --adopt-capacity and --permits (``run`` and ``hold``)."""
    add_name_argument(p, "semaphore name: [A-Za-z0-9._-]{1,128}")
    p.add_argument(
        "--capacity",
        "-c",
        type=positive_int,
        metavar="N",
        help="permits in the semaphore (stored on first use; others must agree); "
        "required unless --adopt-capacity",
    )
    p.add_argument(
        "--adopt-capacity",
        action="store_true",
        help="use the stored capacity if it differs from --capacity (else exit 65); "
        "without --capacity the semaphore must exist (else exit 66)",
    )
    p.add_argument(
        "--permits", "-p", type=positive_int, default=1, metavar="K", help="permits to take"
    )
    p.add_argument(
        "--slot",
        action="store_true",
        help="also take K distinct job slots in 0..N-1 (shard k of N): "
        "SEMAPHORE_RECIPES_SLOT and SEMAPHORE_RECIPES_SLOT_TOKEN",
    )


def check_permits(args: argparse.Namespace) -> None:
    """Before any I/O: a capacity unless the stored one is adopted, and no more permits
    than the capacity (unless the stored one decides)."""
    if args.capacity is None and not args.adopt_capacity:
        raise CliError(
            ExitCode.USAGE,
            "--capacity N is required (or --adopt-capacity: the stored one, which must exist)",
        )
    if args.capacity is None:
        return
    if args.permits > args.capacity and not args.adopt_capacity:
        raise CliError(
            ExitCode.USAGE,
            f"--permits {args.permits} is more than --capacity {args.capacity}",
        )


def open_semaphore(backend: Any, name: str, args: argparse.Namespace) -> Any:
    """``NAME`` with ``--capacity`` (created if missing), or without it (``--adopt-capacity``
    alone) the existing one, whatever its capacity: SemaphoreNotFound if none."""
    if args.capacity is None:
        return backend.semaphore(name, create=False)
    return backend.semaphore(name, args.capacity, adopt_capacity=args.adopt_capacity)


def slot_env(permit: Any) -> dict[str, str]:
    """The job slots of ``permit`` as the command sees them: indices and their tokens,
    comma-separated, lowest index first."""
    return {
        "SEMAPHORE_RECIPES_SLOT": ",".join(str(slot.index) for slot in permit.slots),
        "SEMAPHORE_RECIPES_SLOT_TOKEN": ",".join(str(slot.token) for slot in permit.slots),
    }


def parse_also(values: list[str], name: str) -> dict[str, int]:
    """``--also OTHER:K`` arguments, before any I/O: {OTHER: K}."""
    also: dict[str, int] = {}
    for value in values:
        other, sep, permits = value.rpartition(":")
        if not sep or not other:
            raise CliError(ExitCode.USAGE, f"--also takes OTHER:K, not {value!r}")
        try:
            k = positive_int(permits)
        except argparse.ArgumentTypeError as exc:
            raise CliError(ExitCode.USAGE, f"--also {value}: permits {exc}") from None
        other = check_name(other)
        if other == name or other in also:
            raise CliError(ExitCode.USAGE, f"--also {value}: {other!r} is asked twice")
        also[other] = k
    return also


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text}")
    return value


class _Signals:
    """Signal handling of ``run``: raise while waiting, forward while CMD runs."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.pending: list[int] = []  # arrived after the permit, before CMD started
        self._saved: dict[int, Any] = {}

    def install(self, handler: Callable[[int, FrameType | None], None]) -> None:
        for sig in FORWARDED:
            if sig not in self._saved and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # ignored by whoever started us (nohup, a background job): CMD too
            previous = signal.signal(sig, handler)
            self._saved.setdefault(sig, previous)

    def restore(self) -> None:
        for sig, previous in self._saved.items():
            signal.signal(sig, previous)
        self._saved.clear()

    def while_waiting(self, signum: int, frame: FrameType | None) -> None:
        if signum in (signal.SIGUSR1, signal.SIGUSR2):
            return  # nothing to forward them to yet
        self.received = signum
        raise KeyboardInterrupt

    def while_running(self, signum: int, frame: FrameType | None) -> None:
        if signum in KEYBOARD_SIGNALS and _terminal_sent_it_to_the_child():
            return
        child = self.child
        if child is None:
            self.pending.append(signum)
        elif child.returncode is None:
            _send(child, signum)

    def started(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        while self.pending:
            _send(child, self.pending.pop(0))


def _terminal_sent_it_to_the_child() -> bool:
    """True when we are the foreground process group of our terminal: a key press
    (Ctrl-C, Ctrl-\\) then signals the whole group, CMD included."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def cmd_run(args: argparse.Namespace, command: list[str]) -> int:
    name = check_name(args.name)
    if not command:
        raise CliError(
            ExitCode.USAGE, "no command: give it after `--`, e.g. `run NAME -c 2 -- ./job.sh`"
        )
    check_permits(args)
    also = parse_also(args.also, name)
    if also and args.slot:
        raise CliError(ExitCode.USAGE, "--slot takes slots of NAME alone: not with --also")
    url, _ = resolve_url(args.url)
    signals = _Signals()
    signals.install(signals.while_waiting)
    backend: Any = None
    permit: Any = None
    # (acquire_all reports no position: --also waits silently)
    shown = None if args.quiet or also else PositionLine(name)
    try:
        try:
            backend = connect(url)
            if also:  # before NAME is created
                backend.capabilities.require(backend.scheme, Capability.ACQUIRE_ALL)
            sem = open_semaphore(backend, name, args)
            started = time.monotonic()
            if also:
                # (a multi-permit follows its session; an entry deleted by hand is seen
                # by its fence, not at once: there is no watch_entry for it)
                wanted: dict[Any, int] = {sem: args.permits, **also}
                permit = backend.acquire_all(
                    wanted, timeout=args.timeout, blocking=args.timeout != 0
                )
            else:
                try:
                    permit = sem.acquire(
                        args.permits,
                        timeout=args.timeout,
                        blocking=args.timeout != 0,
                        watch_entry=True,
                        slot=args.slot,
                        on_position=shown,
                    )
                finally:
                    if shown is not None:
                        shown.end()
        except (AcquireTimeout, WouldBlock):
            how = "not free now" if args.timeout == 0 else f"not granted within {args.timeout:g} s"
            what = f"{_plural(args.permits)} of {name!r}" + "".join(
                f" and {_plural(k)} of {other!r}" for other, k in also.items()
            )
            raise CliError(ExitCode.TIMEOUT, f"{what} {how}; left the queue") from None
        except KeyboardInterrupt:
            sig = signals.received or signal.SIGINT
            say(f"interrupted ({signal.Signals(sig).name}) while waiting for {name!r}")
            return 128 + sig
        if args.verbose:
            say(
                f"holding {args.permits} of {sem.capacity} permit(s) of {name!r}"
                + "".join(f" and {k} of {other!r}" for other, k in also.items())
                + ", "
                f"token {permit.token}"
                + (f", slot {slot_env(permit)['SEMAPHORE_RECIPES_SLOT']}" if args.slot else "")
                + f", after {time.monotonic() - started:.2f} s"
            )
        env = dict(os.environ)
        env.update(
            SEMAPHORE_RECIPES_TOKEN=str(permit.token),
            SEMAPHORE_RECIPES_NAME=name,
            SEMAPHORE_RECIPES_PERMITS=str(args.permits),
        )
        if also:  # the other semaphores held (one token for all: one create)
            env["SEMAPHORE_RECIPES_ALSO"] = ",".join(f"{n}:{k}" for n, k in also.items())
        if args.slot:
            env.update(slot_env(permit))
        env[ENV_URL] = url
        return _supervise(command, env, permit, signals, args.on_lost, args.grace, name)
    finally:
        signals.restore()
        if permit is not None:
            permit.release()
        if backend is not None:
            backend.close()


def _supervise(
    command: list[str],
    env: dict[str, str],
    permit: Any,
    signals: _Signals,
    on_lost: str,
    grace: float,
    name: str,
) -> int:
    signals.install(signals.while_running)
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        raise CliError(ExitCode.COMMAND_NOT_FOUND, f"command not found: {command[0]}") from None
    except OSError as exc:
        raise CliError(
            ExitCode.CANNOT_EXECUTE, f"cannot execute {command[0]}: {exc.strerror or exc}"
        ) from None
    signals.started(child)
    lost_at: float | None = None
    kill_at: float | None = None
    revoked = False
    state = PermitState.HELD
    while True:
        code = child.poll()
        if code is not None:
            break
        now = time.monotonic()
        if lost_at is None and permit.lost.is_set():
            lost_at = now
            if on_lost == "terminate":
                say(
                    f"permit of {name!r} lost while the command ran: sending SIGTERM to "
                    f"pid {child.pid}" + (f", SIGKILL in {grace:g} s" if grace else "")
                )
                _send(child, signal.SIGTERM)
                kill_at = now + grace
            elif on_lost == "kill":
                say(f"permit of {name!r} lost while the command ran: SIGKILL to pid {child.pid}")
                _send(child, signal.SIGKILL)
            else:
                say(
                    f"warning: permit of {name!r} lost while the command runs "
                    "(--on-lost=ignore): it no longer holds the semaphore"
                )
        elif lost_at is None and not revoked and permit.revoke_requested.is_set():
            revoked = True  # (a lost permit after this still counts as lost, below)
            say(
                f"permit of {name!r} revoked: sending SIGTERM to pid {child.pid}"
                + (f", SIGKILL in {grace:g} s" if grace else "")
                + "; releasing when it exits"
            )
            _send(child, signal.SIGTERM)
            kill_at = now + grace
        elif lost_at is None:
            current = permit.state
            if current is not state:
                # (the library itself warns when the permit is suspended)
                if current is PermitState.HELD and state is PermitState.SUSPENDED:
                    say(f"connection back: the permit of {name!r} is held again")
                state = current
        if kill_at is not None and now >= kill_at:
            say(f"pid {child.pid} still running {grace:g} s after SIGTERM: SIGKILL")
            _send(child, signal.SIGKILL)
            kill_at = None
        if lost_at is None:
            permit.lost.wait(POLL)
        else:
            time.sleep(POLL)
    if lost_at is not None and on_lost != "ignore":
        return int(ExitCode.PERMIT_LOST)
    return 128 - code if code < 0 else code


def _plural(n: int) -> str:
    return f"{n} permit" + ("" if n == 1 else "s")


def _send(child: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(sig)
