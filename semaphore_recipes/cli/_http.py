"""The small HTTP server of ``hold`` and ``exporter``: probes, metrics, status.

The standard library's :class:`~http.server.ThreadingHTTPServer`: a handful of GET
routes answered from memory (or one bounded store read) need no framework, and the
sidecar image gains no dependency. One thread per connection; each connection's socket
has a timeout (:data:`SOCKET_TIMEOUT`), so a scraper that stops reading or never sends
its request line ties up one thread for that long, never the server.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._common import CliError, ExitCode

log = logging.getLogger("semaphore_recipes")

SOCKET_TIMEOUT = 10.0  #: seconds a connection may stay silent (request or reply)
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = TEXT

    @classmethod
    def text(cls, status: int, text: str) -> Reply:
        return cls(status, (text + "\n").encode())

    @classmethod
    def json(cls, status: int, doc: Any) -> Reply:
        return cls(status, (json.dumps(doc) + "\n").encode(), "application/json")


Route = Callable[[], Reply]


def add_listen_argument(p: argparse.ArgumentParser, default: str, what: str) -> None:
    p.add_argument(
        "--listen",
        "-l",
        default=default,
        metavar="HOST:PORT",
        help=f"where to serve {what} (default {default}; port 0: any free port)",
    )


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; an empty host: every address)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise CliError(ExitCode.USAGE, f"--listen wants HOST:PORT, not {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class ProbeServer:
    """Serves ``routes`` (path -> reply) on ``host:port`` from a thread of its own."""

    def __init__(self, host: str, port: int, routes: Mapping[str, Route]) -> None:
        handler = _handler_for(dict(routes))
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise CliError(
                ExitCode.UNAVAILABLE, f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self._server.daemon_threads = True  # a stuck connection never holds the exit
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        host = str(host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> ProbeServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_for(routes: dict[str, Route]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = SOCKET_TIMEOUT  # StreamRequestHandler sets it on the socket
        server_version = "semaphore-recipes"

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _answer(self, body: bool) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                reply = Reply.text(404, "not found: " + ", ".join(sorted(routes)))
            else:
                try:
                    reply = route()
                except Exception as exc:  # one bad answer must not end the server
                    log.exception("answering %s", self.path)
                    reply = Reply.text(500, f"internal error: {exc!r}")
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if body:
                self.wfile.write(reply.body)

        def log_message(self, format: str, *args: Any) -> None:
            # probes come every few seconds: their lines only at -vv
            log.debug("http %s: " + format, self.address_string(), *args)

    return Handler


def metrics_route(registry: Any) -> Route:
    """``/metrics`` from a ``prometheus_client`` registry, or 501 without the extra."""
    if registry is None:
        return lambda: Reply.text(
            501, "metrics need prometheus_client: pip install 'semaphore-recipes[metrics]'"
        )
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return lambda: Reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
