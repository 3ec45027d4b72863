"""kazoo's threading handler, waiting on its sockets with one ``poll`` call.

kazoo's connection thread waits on its sockets through its handler's ``select`` (the
handler interface's ``select.select`` replacement): before every read of a reply,
every write of a request and every turn of its loop, so several times per request.
The threading handler's ``select`` builds a ``selectors.DefaultSelector`` each time (an
epoll set: its creation, a registration per socket, the wait and its close), which made
that thread the largest client cost of a request (docs/benchmarks.md, "Uncontended").
:class:`PollingHandler` answers the same call with one ``poll(2)``: no descriptor limit
(as with the selector), the same results for the same events, and the same errors for
a closed socket or a negative timeout.

Connection loss is kazoo's to handle, as with its own handler: a socket the server
closed, or one in error, is returned as ready (readable when waited on for reading), so
kazoo's read or write on it raises and its connection thread reconnects. Nothing else
of the handler changes (its threads, queues, callbacks and timeouts are kazoo's).
"""

from __future__ import annotations

import select
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["HAS_POLL", "PollingHandler", "poll_select"]

_READ = getattr(select, "POLLIN", 1)
_WRITE = getattr(select, "POLLOUT", 4)
#: Windows has no poll(2): kazoo's own select is used there
HAS_POLL = hasattr(select, "poll")


def poll_select(
    rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select``'s call and answer, as kazoo's ``selector_select`` gives them
    (an object ready both ways is in the readable list only; nothing is exceptional),
    from one ``poll``."""
    if timeout is not None:
        if not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    wanted: dict[int, int] = {}
    objects: dict[int, list[Any]] = {}
    for mask, fileobjs in ((_READ, rlist), (_WRITE, wlist)):
        for fileobj in fileobjs:
            fd = fileobj_to_fd(fileobj)  # (kazoo's: its TypeError for a closed socket)
            wanted[fd] = wanted.get(fd, 0) | mask
            objects.setdefault(fd, []).append(fileobj)
    poller = select.poll()
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    readable: list[Any] = []
    writable: list[Any] = []
    for fd, happened in poller.poll(None if timeout is None else timeout * 1000):
        # (as the selectors module reads an epoll event: an error or a hang-up makes the
        # socket ready for whatever it was waited on for)
        ready = 0
        if happened & ~_WRITE:
            ready |= _READ
        if happened & ~_READ:
            ready |= _WRITE
        ready &= wanted[fd]
        if ready & _READ:
            readable.extend(objects[fd])
        elif ready & _WRITE:
            writable.extend(objects[fd])
    return readable, writable, []


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]  # (kazoo is untyped)
    """kazoo's ``SequentialThreadingHandler`` whose ``select`` is :func:`poll_select`."""

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        if not HAS_POLL:
            return super().select(*args, **kwargs)  # type: ignore[no-any-return]
        return poll_select(*args, **kwargs)
