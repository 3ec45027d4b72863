"""Telling that a ZooKeeper server's history restarted behind a client.

A client sends, with each session request, the newest zxid (transaction id) it has
seen; a server whose own last zxid is older refuses it and closes the connection
("Refusing session request for client ... as it has seen zxid 0x... our last zxid is
0x..."). That is what a server whose data was wiped, or restored from an older backup,
does to every client that knew it before: kazoo tries again for ever, and nothing says
why. When a server closes a connection at the handshake, :func:`all_older` asks every
server of the client for its last zxid with the ``srvr`` four-letter word (allowed by
ZooKeeper's default ``4lw.commands.whitelist``); every one that answers being older than
the client's, twice :data:`CONFIRM_AFTER` apart, tells the history restarted.
Without ``srvr`` (not allowed, or TLS on the client port) nothing is concluded.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Sequence

__all__ = ["CONFIRM_AFTER", "SRVR_TIMEOUT", "all_older", "history_reset_reason", "server_zxid"]

#: at most this long (seconds) one ``srvr`` exchange may take
SRVR_TIMEOUT = 1.0
#: seconds between the two looks that must both find every server older: a member that
#: restarted with its data catches up with its leader within its sync limit meanwhile
CONFIRM_AFTER = 1.0

_ZXID = re.compile(rb"^Zxid: (0x[0-9a-fA-F]+)", re.M)


def server_zxid(host: str, port: int, timeout: float = SRVR_TIMEOUT) -> int | None:
    """The last zxid of the ZooKeeper server at ``host:port`` (``srvr``), or None when
    it cannot be told (not serving, ``srvr`` not allowed, no answer)."""
    reply = b""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout) as sock:
        sock.sendall(b"srvr")
        while len(reply) < 4096:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    found = _ZXID.search(reply)
    return int(found.group(1), 16) if found else None


def all_older(hosts: Sequence[tuple[str, int]], seen: int) -> tuple[str, int] | None:
    """``(address, its last zxid)`` of the newest server of ``hosts`` when every one
    that answers ``srvr`` (one at least) has a last zxid older than ``seen``; None
    otherwise. One older member of a serving ensemble is only behind its leader."""
    newest: tuple[str, int] | None = None
    for host, port in hosts:
        theirs = server_zxid(host, port)
        if theirs is None:
            continue
        if theirs >= seen:
            return None
        if newest is None or theirs > newest[1]:
            newest = (f"{host}:{port}", theirs)
    return newest


def history_reset_reason(address: str, theirs: int, seen: int) -> str:
    """The words of the error: what happened, what it means, what to do."""
    return (
        f"the ZooKeeper store's history restarted: the server at {address} has the last "
        f"transaction 0x{theirs:x}, older than the 0x{seen:x} this client has seen (its data "
        "was wiped, or restored from an older backup), so it refuses this client's session "
        "for good; every session, entry and fencing token of before is gone (tokens start "
        "again: reset a fence that kept them, docs/operations.md); open a new backend"
    )
