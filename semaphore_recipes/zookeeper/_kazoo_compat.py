"""What the ZooKeeper backend reads of kazoo beyond its public API, in one place.

Checked against kazoo 2.11. (Older reads of kazoo internals, ``_session_id``,
``_session_timeout`` and ``_data_watchers``, are still where they are used; an issue
moves them here.)
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any


def connection_loop_died(client: Any) -> bool:
    """Did the client's connection loop end without ``stop()`` being called?

    kazoo runs one connection thread per started client (``zk_loop``). An exception
    it does not expect (a reply with an unexpected xid raises RuntimeError there) ends
    the loop: kazoo then reports the session closed (KazooState.LOST), fails the
    pending requests and fails every later one with ConnectionClosedError, but never
    connects again. ``stop()`` ends the loop too, after setting ``_stopped``; the loop
    sets ``connection_stopped`` as it ends, whatever the reason.
    """
    connection = getattr(client, "_connection", None)
    stopped = getattr(client, "_stopped", None)
    if connection is None or stopped is None:
        return False
    return bool(connection.connection_stopped.is_set() and not stopped.is_set())


def drop_connection(client: Any) -> None:
    """Shut the client's socket down, so that a ``stop()`` waiting for the reply to its
    close request gives up. kazoo sends the close once and then waits for its reply,
    pinging meanwhile; if the request was lost (the network dropped it), the pings
    that get through after the network heals keep the session alive with no end. After
    this the connection loop sees the socket broken and ends (``_stopped`` is set);
    the server expires the session after its timeout."""
    connection = getattr(client, "_connection", None)
    sock = getattr(connection, "_socket", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
