"""ZooKeeper for tests: the server launchers, and real session expiry.

The launchers live in :mod:`semaphore_recipes.devtools.zookeeper_server` (``dev-server``
uses them too) and are re-exported here. :func:`expire_session` is the test tool of this module:
it makes the server expire a kazoo client's session, for real.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..devtools.zookeeper_server import (
    JVM_FLAGS,
    ZooKeeperEnsemble,
    ZooKeeperNotFound,
    ZooKeeperServer,
    find_zookeeper_classpath,
)

if TYPE_CHECKING:
    from kazoo.client import KazooClient

__all__ = [
    "JVM_FLAGS",
    "ZooKeeperEnsemble",
    "ZooKeeperNotFound",
    "ZooKeeperServer",
    "expire_session",
    "find_zookeeper_classpath",
]

logger = logging.getLogger("semaphore_recipes.testing")


# --------------------------------------------------------------------------- sessions


def _hosts_string(client: KazooClient) -> str:
    # kazoo keeps the parsed host list as ``client.hosts``: a list of (host, port)
    # tuples; the chroot lives separately in ``client.chroot`` and does not matter
    # for the session.
    parts = []
    for host, port in client.hosts:
        parts.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return ",".join(parts)


def expire_session(
    client: KazooClient,
    timeout: float = 10.0,
    *,
    hosts: str | None = None,
) -> None:
    """Make the ZooKeeper server expire ``client``'s session, for real.

    A second client attaches to the same session (id + password), which makes the
    server drop the original connection, and then closes the session. The original
    client, on reconnecting, is told the session expired. Returns once ``client``
    has reported ``KazooState.LOST``; raises TimeoutError otherwise. Should the
    original client win the race and re-attach first, the steal is repeated.
    """
    from kazoo.client import KazooClient
    from kazoo.protocol.states import KazooState, KeeperState

    from ..zookeeper import _kazoo_compat

    lost = threading.Event()

    def listener(state: Any) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True
        return False

    client_id = client.client_id
    if client_id is None:  # suspended right now; the session may still be alive
        session_id = _kazoo_compat.session_id(client)
        if session_id is None:
            raise RuntimeError("client has no ZooKeeper session to expire")
        client_id = (session_id, _kazoo_compat.session_password(client))
    session_id = client_id[0]
    if hosts is None:
        hosts = _hosts_string(client)

    deadline = time.monotonic() + timeout
    client.add_listener(listener)
    try:
        attempt = 0
        while not lost.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempt += 1
            twin = KazooClient(
                hosts=hosts,
                client_id=client_id,
                connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5},
            )
            twin_state = "unknown"
            try:
                twin.start_async()
                twin_deadline = time.monotonic() + min(remaining, 5.0)
                while time.monotonic() < twin_deadline and not lost.is_set():
                    if twin.connected:
                        current = twin.client_id
                        twin_state = "attached" if current and current[0] == session_id else "gone"
                        break
                    if twin.client_state == KeeperState.EXPIRED_SESSION:
                        twin_state = "gone"
                        break
                    time.sleep(0.005)
            finally:
                # Closing the twin closes the session it attached to.
                twin.stop()
                twin.close()
            logger.debug(
                "expire_session: attempt %d for session 0x%x: %s", attempt, session_id, twin_state
            )
            # The original client notices on its next reconnect attempt.
            wait = 30.0 if twin_state == "gone" else 2.0
            lost.wait(max(0.0, min(deadline - time.monotonic(), wait)))
    finally:
        client.remove_listener(listener)
    if not lost.is_set():
        raise TimeoutError(f"session 0x{session_id:x} was not reported LOST within {timeout:.1f}s")
