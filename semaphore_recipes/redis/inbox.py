"""Reading a client's inbox: the messages the scripts leave for its entries.

On one primary the client has one inbox list (``P:inbox:<lease>``) and the notifier
blocks on it (``BLPOP``, :class:`InboxList`). On Redis Cluster it has one per hash tag
in use (``P:{T}:inbox:<lease>``, :mod:`.layout`), and one ``BLPOP`` cannot span slots;
there the scripts also ring a doorbell, a sharded pub/sub message (``SPUBLISH``,
Redis 7) on the channel of the inbox's own name, and :class:`InboxDoorbells` keeps one
listener per node serving a tag in use (a thread and a connection each: bounded by the
primaries, whatever the number of tags or waiters), then takes the messages from the
rung inbox (``LPOP``). A doorbell is only a hint: the list keeps every message, and
whatever may have been missed (a listener's connection lost, a channel subscribed
after its push) is read by draining every inbox, which :meth:`InboxDoorbells.wait`
does for each channel it subscribes and after a broken listener.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .._inbox import Inbox
from .calls import TRANSIENT

__all__ = ["InboxDoorbells", "InboxList", "InboxReader"]

log = logging.getLogger("semaphore_recipes.redis")

#: messages taken from an inbox per LPOP
BATCH = 100


class InboxReader(Protocol):
    def wait(self, inboxes: Iterable[str], timeout: float) -> list[bytes]:
        """The messages of ``inboxes`` (their keys), waiting at most ``timeout`` seconds
        for one; raises a redis-py connection error when the server cannot be read
        (every inbox is read again next time)."""
        ...

    def close(self) -> None: ...


def _raw(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class InboxList:
    """One inbox, read with ``BLPOP`` on ``client``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def wait(self, inboxes: Iterable[str], timeout: float) -> list[bytes]:
        item = self.client.blpop(list(inboxes), timeout=timeout)
        return [] if item is None else [_raw(item[1])]

    def close(self) -> None:
        return None


class _Listener:
    """One node's sharded pub/sub connection, on a thread: rings ``ring(channel)``
    for each doorbell, ``broken()`` once when the connection fails."""

    def __init__(
        self,
        node_client: Any,
        channels: set[str],
        ring: Callable[[str], None],
        broken: Callable[[], None],
    ) -> None:
        self.channels = set(channels)
        self._pubsub = node_client.pubsub()
        self._ring = ring
        self._broken = broken
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._subscribe(channels)
        self._thread = threading.Thread(
            target=self._run, name="semaphore-recipes-redis-doorbell", daemon=True
        )
        self._thread.start()

    def _subscribe(self, channels: set[str]) -> None:
        for channel in sorted(channels):  # (one SSUBSCRIBE names channels of one slot)
            self._pubsub.ssubscribe(channel)

    def subscribe(self, channels: set[str]) -> None:
        with self._lock:
            self._subscribe(channels)
            self.channels |= channels

    def unsubscribe(self, channels: set[str]) -> None:
        with self._lock:
            for channel in sorted(channels):
                self._pubsub.sunsubscribe(channel)
            self.channels -= channels

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                message = self._pubsub.get_sharded_message(timeout=0.5)
            except Exception as exc:  # (a closed connection too: the stop ends the loop)
                if not self._stop.is_set():
                    log.info("redis doorbell listener: %s", exc)
                    self._broken()
                return
            if message is not None and message.get("type") in ("smessage", b"smessage"):
                self._ring(_raw(message["channel"]).decode())

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            self._pubsub.close()


class InboxDoorbells:
    """The inboxes of several hash tags on a Redis Cluster ``client``: doorbells heard
    by a listener per node, messages taken with ``LPOP``."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._rung: Inbox[str | None] = Inbox()
        self._listeners: dict[str, _Listener] = {}  # node name -> its listener
        self._broken = threading.Event()

    def wait(self, inboxes: Iterable[str], timeout: float) -> list[bytes]:
        wanted = set(inboxes)
        if self._broken.is_set():
            self._broken.clear()
            self.close()  # (listeners are made again, on the nodes serving now)
        fresh = self._subscribe(wanted)
        messages = [m for key in sorted(fresh) for m in self._drain(key)]
        if messages:
            return messages
        try:
            rung = self._rung.get(timeout=timeout)
        except queue.Empty:
            return []
        keys = {rung}
        with contextlib.suppress(queue.Empty):
            while True:  # (every doorbell that came meanwhile, each inbox read once)
                keys.add(self._rung.get_nowait())
        return [m for key in sorted(k for k in keys if k in wanted) for m in self._drain(key)]

    def _subscribe(self, wanted: set[str]) -> set[str]:
        """Listen for ``wanted`` (and no longer for the others): the channels newly
        listened to, whose inboxes may hold messages pushed before."""
        have = {c for listener in self._listeners.values() for c in listener.channels}
        for listener in self._listeners.values():
            stale = listener.channels - wanted
            if stale:
                listener.unsubscribe(stale)
        fresh = wanted - have
        by_node: dict[str, set[str]] = {}
        for channel in fresh:
            by_node.setdefault(self.client.get_node_from_key(channel).name, set()).add(channel)
        for name, channels in by_node.items():
            known = self._listeners.get(name)
            if known is not None:
                known.subscribe(channels)
                continue
            node_client = self.client.get_node(node_name=name).redis_connection
            if node_client is None:
                raise TRANSIENT[0](f"no connection to cluster node {name}")
            self._listeners[name] = _Listener(
                node_client, channels, self._rung.put, self._broken.set
            )
        return fresh

    def _drain(self, key: str) -> list[bytes]:
        out: list[bytes] = []
        while True:
            got = self.client.lpop(key, BATCH)
            if not got:
                return out
            out += [_raw(m) for m in got]
            if len(got) < BATCH:
                return out

    def close(self) -> None:
        listeners, self._listeners = list(self._listeners.values()), {}
        for listener in listeners:
            listener.close()
