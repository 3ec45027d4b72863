"""Everything the library reads or relies on of kazoo beyond its public API, in one place.

kazoo is declared as ``>=2.9,<2.12`` in pyproject.toml; each function below was checked
against the source of kazoo 2.9.0, 2.10.0 and 2.11.0 (the attributes and behaviours used
are the same in all three), and ``tests/zookeeper/test_kazoo_compat.py`` pins each one
against the installed kazoo with a real ZooKeeper (``scripts/kazoo-versions`` runs it
with the oldest and the newest supported release). No other module of the project names
a kazoo private attribute (``tests/zookeeper/test_kazoo_compat.py`` scans for them).

The names read here are listed in :data:`PRIVATE_NAMES`: add any new one there.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

#: The kazoo attributes and methods outside its public API that this module uses: the
#: repository scan fails when any other file names one of them.
PRIVATE_NAMES = (
    "_session_id",
    "_session_timeout",
    "_session_passwd",
    "_data_watchers",
    "_child_watchers",
    "_connection",
    "_stopped",
    "_socket",
    "_connect",
    "_read_response",
    "_write_sock",
    "_call",
    "dispatch_callback",
)


# ---- the session ------------------------------------------------------------------
def session_id(client: Any) -> int | None:
    """The id of the session the client has or is trying to resume; None before the
    first connection and after the session ended (expired or closed).

    kazoo's public ``client_id`` is None while the client is disconnected, but its
    ``_session_id`` keeps the session it is trying to resume (kazoo sends it in every
    reconnect attempt; it is cleared when the session expires or the client is stopped).
    SUSPENDED and CONNECTED compare it to tell "same session back" from "new session".
    """
    sid = getattr(client, "_session_id", None)
    return int(sid) if sid else None


def session_timeout(client: Any) -> float:
    """The session timeout, in seconds: the one ZooKeeper negotiated when
    :func:`track_negotiated_session_timeout` saw the client connect, else the one the
    client asks for.

    The server clamps the timeout a client asks for to its ``minSessionTimeout``..
    ``maxSessionTimeout`` (by default 2 to 20 ticks) and expires the session after the
    negotiated one. kazoo keeps only the one asked for (``_session_timeout``, in
    milliseconds); the negotiated one is a local variable of its connect.
    """
    negotiated = _negotiated_timeouts.get(client)
    if negotiated is not None:
        return negotiated
    return float(client._session_timeout) / 1000.0


#: client -> the session timeout the server negotiated at its last connection (seconds)
_negotiated_timeouts: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def track_negotiated_session_timeout(client: Any) -> None:
    """From now on, note the session timeout ZooKeeper negotiates each time ``client``
    connects, for :func:`session_timeout`. Call it before ``start()``: a client already
    connected is seen at its next connection only. Calling it again does nothing.

    kazoo's connection handler ``_connect`` connects and returns ``(read_timeout,
    connect_timeout)`` in milliseconds, where ``read_timeout`` is two thirds of the
    negotiated session timeout. It runs on kazoo's connection thread and returns before
    that thread reads anything else, so the value is noted before any later state
    change (the CONNECTED one is reported from within it, just before). The same
    wrapper notes why each failed connection attempt failed, for
    :func:`last_connect_failure` and :func:`add_connect_failure_listener`.
    """
    connection = client._connection
    connect = connection._connect
    if getattr(connect, "_records_negotiated_timeout", False):
        return

    def connect_and_record(*args: Any, **kwargs: Any) -> Any:
        try:
            read_timeout, connect_timeout = connect(*args, **kwargs)
        except Exception as exc:
            # kazoo turns a socket error (ssl.SSLError among them) into ConnectionDropped
            # raised while handling it: the original is the context
            failure = exc.__context__ or exc
            _connect_failures[client] = failure
            _tell_connect_failure(client, args, failure)
            if _closed_at_handshake(client, exc):
                for listener in list(_handshake_listeners.get(client, ())):
                    listener()
            elif isinstance(exc.__context__, OSError) and len(args) == 3:
                _, hostip, port = args
                for refusal in list(_refusal_listeners.get(client, ())):
                    refusal(str(hostip), int(port), exc.__context__)
            raise
        _connect_failures.pop(client, None)
        # milliseconds, rounded: kazoo computes read_timeout as negotiated * 2.0 / 3.0
        _negotiated_timeouts[client] = round(read_timeout * 3 / 2) / 1000.0
        return read_timeout, connect_timeout

    connect_and_record._records_negotiated_timeout = True  # type: ignore[attr-defined]
    connection._connect = connect_and_record


#: client -> why its last connection attempt failed (absent once one succeeded)
_connect_failures: weakref.WeakKeyDictionary[Any, BaseException] = weakref.WeakKeyDictionary()


def last_connect_failure(client: Any) -> BaseException | None:
    """Why the client's last connection attempt failed (an ``ssl.SSLError`` when the
    TLS handshake did, a kazoo error otherwise); None before any attempt failed and
    after one succeeded. Noted by the wrapper :func:`track_negotiated_session_timeout`
    installs: kazoo logs these failures and retries, but keeps none of them (a start
    that never connects just times out)."""
    return _connect_failures.get(client)


ConnectFailureListener = Callable[[str, int, BaseException], None]
#: client -> the functions told of each failed connection attempt
_failure_listeners: weakref.WeakKeyDictionary[Any, list[ConnectFailureListener]] = (
    weakref.WeakKeyDictionary()
)
_log = logging.getLogger("semaphore_recipes.zookeeper")


def add_connect_failure_listener(client: Any, listener: ConnectFailureListener) -> None:
    """Call ``listener(host, port, error)`` after each failed connection attempt of
    ``client`` (``error`` as :func:`last_connect_failure` gives it; ``host`` and ``port``
    as in ``client.hosts``), on kazoo's connection thread, before kazoo retries. Needs
    :func:`track_negotiated_session_timeout`. An exception of the listener is logged
    and dropped: raised there, it would end kazoo's connection loop."""
    _failure_listeners.setdefault(client, []).append(listener)


def remove_connect_failure_listener(client: Any, listener: ConnectFailureListener) -> None:
    """Undo :func:`add_connect_failure_listener` (nothing if it is not there)."""
    with contextlib.suppress(KeyError, ValueError):
        _failure_listeners[client].remove(listener)


def _tell_connect_failure(client: Any, args: tuple[Any, ...], failure: BaseException) -> None:
    for listener in list(_failure_listeners.get(client, ())):
        try:
            host, port = args[0], args[-1]  # kazoo calls _connect(host, hostip, port)
            listener(host, port, failure)
        except Exception:
            _log.exception("a connect failure listener failed")


#: client -> what to call when a server closes its connection at the handshake
_handshake_listeners: weakref.WeakKeyDictionary[Any, list[Callable[[], None]]]
_handshake_listeners = weakref.WeakKeyDictionary()


def on_handshake_closed(client: Any, listener: Callable[[], None]) -> None:
    """Call ``listener()`` each time a server closes ``client``'s connection in answer
    to its session request, before any reply; on kazoo's connection thread (it must not
    block). ZooKeeper does that to a client that has seen a zxid newer than the server's
    own ("Refusing session request for client ... as it has seen zxid"), to every client
    while it is not serving (no quorum), and past ``maxClientCnxns``. Call it before
    ``start()``, as :func:`track_negotiated_session_timeout` (which it calls).

    kazoo's ``_connect`` opens the socket, sends the Connect request and reads the
    reply; a closed socket there raises ConnectionDropped ("socket connection broken",
    or a socket error such as a reset) while the client's state is still CONNECTING
    (kazoo reports CONNECTED just after the reply is read).
    """
    track_negotiated_session_timeout(client)
    _handshake_listeners.setdefault(client, []).append(listener)


#: client -> what to call when a connection attempt fails before reaching a server
_refusal_listeners: weakref.WeakKeyDictionary[Any, list[Callable[[str, int, OSError], None]]]
_refusal_listeners = weakref.WeakKeyDictionary()


def on_connection_failed(client: Any, listener: Callable[[str, int, OSError], None]) -> None:
    """Call ``listener(ip, port, error)`` each time one of ``client``'s connection
    attempts fails at the socket (a refused connection: ``ConnectionRefusedError``), on
    kazoo's connection thread (it must not block). Call it before ``start()``.

    kazoo's ``_connect(host, hostip, port)`` opens the socket inside a handler that turns
    a socket error into ConnectionDropped, raised while that error is being handled: it
    is the ConnectionDropped's ``__context__``.
    """
    track_negotiated_session_timeout(client)
    _refusal_listeners.setdefault(client, []).append(listener)


def _closed_at_handshake(client: Any, exc: BaseException) -> bool:
    from kazoo.exceptions import ConnectionDropped
    from kazoo.protocol.states import KeeperState

    if not isinstance(exc, ConnectionDropped) or client.client_state != KeeperState.CONNECTING:
        return False
    # a refused TCP connection is no handshake: the server never saw the request
    return "connection broken" in str(exc) or isinstance(exc.__context__, ConnectionResetError)


def last_zxid(client: Any) -> int:
    """The newest zxid (ZooKeeper transaction id) the client has seen in a reply: kazoo
    sends it in each session request, and a server whose own last zxid is older refuses
    the client. kazoo keeps it as ``last_zxid`` (an attribute outside its documented
    API), 0 before the first reply."""
    return int(getattr(client, "last_zxid", 0) or 0)


def session_password(client: Any) -> bytes:
    """The password of the client's session: with :func:`session_id`, what a second
    client needs to attach to the same session (the test harness's real expiry).

    kazoo keeps it as ``_session_passwd`` (16 zero bytes when there is no session)."""
    return bytes(client._session_passwd)


# ---- watches and kazoo's threads --------------------------------------------------
def data_watch_registered(client: Any, path: str, watcher: Callable[..., Any]) -> bool:
    """Is ``watcher`` registered with kazoo as a data watch of ``path`` right now?

    ``path`` is the full path, chroot included: kazoo's key. kazoo's connection thread
    adds the watcher to ``_data_watchers[path]`` as it reads the reply of the read that
    set it, and pops the path's watchers as it reads the watch event, before it reads
    any later reply. False when kazoo has no such table (the caller then reads again).
    """
    watchers = getattr(client, "_data_watchers", None)
    return watchers is not None and watcher in watchers.get(path, ())


def run_on_callback_thread(client: Any, fn: Callable[[], None]) -> None:
    """Run ``fn()`` soon on kazoo's callback thread (where kazoo runs watch callbacks
    and ``rawlink`` functions), in order with them; returns at once.

    kazoo's handler interface has ``dispatch_callback(Callback(type, func, args))``,
    documented for kazoo's own watch callbacks; the threading handler puts the call on
    its callback queue. Exceptions ``fn`` raises are logged by kazoo and dropped.
    """
    client.handler.dispatch_callback(_callback_type()("semaphore_recipes", fn, ()))


@functools.cache
def _callback_type() -> Any:
    # imported on first use, once: this module is imported without kazoo installed
    from kazoo.protocol.states import Callback

    return Callback


def interrupted_request(exc: BaseException, client: Any) -> bool:
    """Is ``exc``, raised by a request of ``client``, a KeyboardInterrupt that kazoo
    swallowed rather than the client being closed?

    ``KazooClient._call`` queues the request, then wakes its connection thread with a
    one-byte send inside a bare ``except:``; any exception there, a KeyboardInterrupt
    landing on that line included, is set on the request as ConnectionClosedError. The
    request stays queued and may still be sent. kazoo gives that error to a closed
    client's requests too; the client's state tells the two apart.
    """
    from kazoo.exceptions import ConnectionClosedError
    from kazoo.protocol.states import KeeperState

    return isinstance(exc, ConnectionClosedError) and client.client_state != KeeperState.CLOSED


def note_swallowed_interrupts(client: Any) -> None:
    """From now on, note each KeyboardInterrupt that kazoo swallows while queueing a
    request of ``client``, for :func:`take_swallowed_interrupt`, and wake the
    connection thread again so that no request lags behind. Calling it again does
    nothing; it survives reconnects and restarts (it wraps the client's ``_call``).

    The request's result cannot tell: kazoo sets ConnectionClosedError on it, but the
    request stays queued, and once something wakes the connection thread its reply
    replaces that error. So the swallowing is noted as it happens: during ``_call``, the
    request's ``set_exception`` is wrapped, and called while this thread handles a
    KeyboardInterrupt it is kazoo's bare ``except:`` swallowing one, wherever in its
    ``try`` the interrupt landed (before the byte went out or after: a byte too many is
    harmless). An interrupt that escapes ``_call`` after the request was queued leaves
    it without its wake-up too: that one wakes the thread and goes on.
    """
    call = client._call
    if getattr(call, "_notes_swallowed_interrupts", False):
        return

    def call_noting(request: Any, async_object: Any) -> Any:
        # an interrupt the caller is handling already (a cleanup) is not kazoo's to swallow
        handled_already = sys.exc_info()[1]
        try:
            async_object.set_exception = functools.partial(
                _set_exception_noting, client, handled_already, async_object.set_exception
            )
        except (AttributeError, TypeError):  # a result type without instance attributes
            return call(request, async_object)
        try:
            return call(request, async_object)
        except KeyboardInterrupt:
            wake_connection_thread(client)
            raise
        finally:
            with contextlib.suppress(AttributeError):
                del async_object.set_exception

    call_noting._notes_swallowed_interrupts = True  # type: ignore[attr-defined]
    client._call = call_noting


def _set_exception_noting(
    client: Any, handled_already: BaseException | None, set_exception: Any, exc: BaseException
) -> None:
    handled = sys.exc_info()[1]
    if isinstance(handled, KeyboardInterrupt) and handled is not handled_already:
        with _swallowed_lock:
            _swallowed_interrupts.setdefault(client, set()).add(threading.get_ident())
        wake_connection_thread(client)
    set_exception(exc)


#: client -> the threads on which kazoo swallowed a KeyboardInterrupt not yet taken
_swallowed_interrupts: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()
_swallowed_lock = threading.Lock()


def take_swallowed_interrupt(client: Any) -> bool:
    """Did kazoo swallow a KeyboardInterrupt in a request of ``client`` issued on this
    thread since the last call (see :func:`note_swallowed_interrupts`)? Each one is
    told once."""
    try:
        threads = _swallowed_interrupts.get(client)
    except TypeError:  # no weak reference to it (a stand-in): nothing was noted for it
        return False
    if not threads:
        return False  # (the usual answer, without the lock)
    with _swallowed_lock:
        if threading.get_ident() not in threads:
            return False
        threads.discard(threading.get_ident())
        return True


def wake_connection_thread(client: Any) -> None:
    """Wake kazoo's connection thread as ``KazooClient._call`` does after queueing a
    request (one byte on its wake-up socket), for a request whose own wake-up an
    interrupt may have cut short (:func:`interrupted_request`).

    kazoo's connection thread sends one queued request per byte it reads there. A
    request whose byte was never sent stays queued until the next request's byte sends
    it, and that request then waits for the one after: every later request, the close
    of ``stop()`` included, lags one behind. A byte too many is harmless: kazoo reads
    it, finds the queue empty and goes on.
    """
    write_sock = getattr(getattr(client, "_connection", None), "_write_sock", None)
    if write_sock is not None:
        with contextlib.suppress(OSError):
            write_sock.send(b"\0")


# ---- kazoo's connection loop ------------------------------------------------------
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


# ---- for tests: kazoo's failures, made on purpose ------------------------------------
def kill_connection_loop_at_next_reply(client: Any) -> None:
    """Make the client's connection loop die for real at the next reply it reads, the
    way a reply with an unexpected xid kills it: kazoo's own ``_read_response`` sets the
    RuntimeError on the request and raises it out of the loop. Only that one reply is
    touched. For tests of :func:`connection_loop_died`."""
    connection = client._connection
    original = connection._read_response

    def read_response(header: Any, buffer: Any, offset: Any) -> Any:
        connection._read_response = original
        header = type(header)(header.xid + 1, header.zxid, header.err)
        return original(header, buffer, offset)

    connection._read_response = read_response


class _InterruptingWakeSocket:
    """Stands in for kazoo's wake-up socket for one send: raises KeyboardInterrupt
    there, as a Ctrl-C arriving on that line would, then puts the real one back."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.real = connection._write_sock

    def send(self, data: bytes) -> int:
        self.connection._write_sock = self.real
        raise KeyboardInterrupt

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def interrupt_next_wakeup(client: Any) -> None:
    """Raise KeyboardInterrupt inside the next request's wake-up of kazoo's connection
    thread (the bare ``except:`` of ``KazooClient._call``), once, before its byte is
    sent. The request stays queued but is not sent until something else wakes the
    thread (:func:`note_swallowed_interrupts` does, as for a real interrupt). For tests
    of :func:`interrupted_request` and :func:`note_swallowed_interrupts`."""
    connection = client._connection
    connection._write_sock = _InterruptingWakeSocket(connection)
