"""``semaphore-recipes exporter NAME...|--all``: the store-wide view of semaphores for Prometheus.

Serves ``/metrics`` (capacity, permits in use, holders, queue length, oldest waiter age
and ``status_up`` per semaphore: :class:`semaphore_recipes.prometheus.StatusCollector`),
``/`` (a status page: each semaphore's holders and waiters, :mod:`._status_page`, from
the same readings) and ``/healthz`` on ``--listen``, until SIGTERM or SIGINT (exit 0).
Each scrape (or page) reads the semaphores' status, at most once per ``--min-interval``
seconds; it writes nothing, so read-only credentials are enough. Needs the
``[metrics]`` extra (exit 69 without).

Connection loss: a read that fails (the store unreachable within the request timeout)
sets ``status_up`` to 0 for that semaphore and the scrape still answers; ``/healthz``
answers 503 once the session can never come back (failed or closed). A semaphore that
does not exist (yet) reports ``status_up`` 0. With ``--all`` the semaphores are those
``backend.list()`` finds, listed again at most once per ``--min-interval`` (a listing
that fails keeps the last names).
"""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType
from typing import Any

from ..backend import SessionState
from ._common import CliError, ExitCode, check_name, connect, describe_url, resolve_url, say
from ._http import HTML, ProbeServer, Reply, add_listen_argument, metrics_route, parse_listen
from ._status_page import status_page
from .run import non_negative_float

DEFAULT_LISTEN = "0.0.0.0:8480"
DEFAULT_MIN_INTERVAL = 5.0


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "exporter",
        parents=parents,
        help="serve Prometheus metrics and a status page of the semaphores",
        description="Serve /metrics with capacity, use, queue length and oldest waiter "
        "age of each NAME, and / a status page of their holders and waiters, read from "
        "the store when asked (at most every --min-interval seconds). Read-only. Needs "
        "the [metrics] extra.",
    )
    p.add_argument("names", metavar="NAME", nargs="*", help="semaphores to export")
    p.add_argument(
        "--all",
        action="store_true",
        help="export every semaphore of the namespace, listed again at most every "
        "--min-interval seconds (they come and go); instead of NAMEs",
    )
    add_listen_argument(p, DEFAULT_LISTEN, "/metrics and /healthz")
    p.add_argument(
        "--min-interval",
        type=non_negative_float,
        default=DEFAULT_MIN_INTERVAL,
        metavar="S",
        help=f"read each status at most every S seconds (default {DEFAULT_MIN_INTERVAL:g})",
    )
    p.set_defaults(handler=cmd_exporter)


def cmd_exporter(args: argparse.Namespace, command: list[str]) -> int:
    names = [check_name(n) for n in args.names]
    if bool(names) == args.all:
        raise CliError(ExitCode.USAGE, "exporter takes NAME... or --all (one of them)")
    url, parsed = resolve_url(args.url)
    host, port = parse_listen(args.listen)
    try:
        from prometheus_client import CollectorRegistry

        from ..prometheus import StatusCollector
    except ImportError:
        raise CliError(
            ExitCode.UNAVAILABLE,
            "exporter needs prometheus_client: pip install 'semaphore-recipes[metrics]'",
        ) from None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    saved = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    backend = connect(url)
    try:
        registry = CollectorRegistry()
        listed = None if not args.all else lambda: [s.name for s in backend.list()]
        collector = StatusCollector(
            backend.status, names, min_interval=args.min_interval, list_names=listed
        )
        registry.register(collector)
        where = describe_url(parsed)

        def page() -> Reply:
            # (reloads as often as a read may be made, and at least every 2 s)
            html = status_page(collector.readings(), where, max(2.0, args.min_interval))
            return Reply(200, html.encode(), HTML)

        def healthz() -> Reply:
            state = backend.session_state
            dead = state in (SessionState.FAILED, SessionState.CLOSED)
            return Reply.text(503 if dead else 200, f"session {state.value}")

        server = ProbeServer(
            host,
            port,
            {"/": page, "/metrics": metrics_route(registry), "/healthz": healthz},
        ).start()
        try:
            say(
                f"exporter: listening on http://{server.address} "
                f"({'every semaphore' if args.all else f'{len(names)} semaphore(s)'} "
                f"at {describe_url(parsed)})"
            )
            while not stop.wait(1.0):
                pass
        finally:
            server.close()
    finally:
        backend.close()
        for sig, previous in saved.items():
            signal.signal(sig, previous)
    return 0
