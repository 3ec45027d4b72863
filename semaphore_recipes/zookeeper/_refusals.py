"""Telling, while a new kazoo client connects, that every server refused it.

kazoo tries the addresses of its hosts in turn, again and again, and a refused
connection costs it nothing but a line in its log: the connect would wait for its whole
timeout. :class:`Refusals` hears of every failed attempt (``_kazoo_compat``) and says
when every address of the URL has refused (and none has done anything else, such as
time out: a silent member may be on its way back), so that ``connect()`` can fail at
once. It resolves the host names as kazoo does (each address of a name is tried), once,
when made.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable, Sequence

from .._reachability import REFUSED, Knock, refusal_error
from ..errors import BackendUnavailable

__all__ = ["Refusals"]

# what a connection attempt meets that says "no" at once
_NO_AT_ONCE = {errno.ECONNREFUSED: REFUSED, errno.ENETUNREACH: "network unreachable",
               errno.EHOSTUNREACH: "host unreachable"}  # fmt: skip


class Refusals:
    """The failed connection attempts of one client to ``hosts`` (thread-safe)."""

    def __init__(self, hosts: Sequence[tuple[str, int]]) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._named: dict[tuple[str, int], str] = {}  # (ip, port) -> "host:port" of the URL
        self._said: dict[tuple[str, int], str] = {}  # what each address said at once
        self._unresolved: list[Knock] = []
        self._answered: set[tuple[str, int]] = set()  # timed out, reset...: not a no
        for host, port in hosts:
            try:
                rows = socket.getaddrinfo(host, port, 0, 0, socket.IPPROTO_TCP)
            except OSError as exc:
                self._unresolved.append(Knock(f"{host}:{port}", f"does not resolve ({exc})"))
                continue
            for row in rows:
                self._named[(str(row[4][0]), int(row[4][1]))] = f"{host}:{port}"

    def on_everywhere(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` when every address has refused (from kazoo's thread)."""
        with self._lock:
            self._listeners.append(listener)

    def failed(self, ip: str, port: int, error: OSError) -> None:
        """An attempt to ``ip:port`` failed with ``error`` (kazoo's connection thread)."""
        key = (ip, port)
        with self._lock:
            said = _NO_AT_ONCE.get(error.errno or 0)
            if said is None:
                self._answered.add(key)
            else:
                self._said[key] = said
            listeners = list(self._listeners) if self._everywhere() else []
        for listener in listeners:
            listener()

    def everywhere(self) -> bool:
        """Has every address said no at once (none of them anything else)?"""
        with self._lock:
            return self._everywhere()

    def _everywhere(self) -> bool:
        if self._answered:
            return False
        return all(key in self._said for key in self._named)

    def error(self) -> BackendUnavailable:
        """The error naming each address and what it said."""
        with self._lock:
            knocks = [Knock(self._named[key], said) for key, said in self._said.items()]
        refusal = refusal_error("ZooKeeper", self._unresolved + knocks)
        assert refusal is not None, "error() before every address said no"
        return refusal
