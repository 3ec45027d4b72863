"""A fault-injecting TCP proxy for cutting one client's connection in tests.

:class:`FaultProxy` listens on an ephemeral 127.0.0.1 port and forwards every
accepted connection to one upstream ``host:port``. Point one client at
``proxy.address`` (other clients keep talking to the server directly) and break
its network on demand::

    with FaultProxy(server.host_port) as proxy:
        client = KazooClient(hosts=proxy.address)
        ...
        proxy.cut()        # connections reset; new ones closed at once
        proxy.restore()

All sockets are served by one selector thread; the fault methods hand their work
to that thread and return once it is done, so after ``cut()`` returns every
connection that existed is closed.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["FaultProxy", "ProxyMode"]

logger = logging.getLogger("semaphore_recipes.testing")

_CHUNK = 65536
_MAX_BUFFER = 4 * 1024 * 1024  # stop reading a side while this much waits for the other


class ProxyMode(enum.Enum):
    FORWARD = "forward"
    CUT = "cut"
    DROP_REPLIES = "drop_replies"
    BLACKHOLE = "blackhole"
    HOLD = "hold"


def _parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got {address!r}")
    return host.strip("[]"), int(port)


class _Side:
    """One socket of a proxied connection plus the bytes waiting to be sent to it."""

    __slots__ = ("closed", "eof", "outbuf", "shut_peer", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.outbuf = bytearray()
        self.eof = False  # no more bytes will be read from this socket
        self.closed = False
        self.shut_peer = False  # our EOF was passed on to the other side


class _Conn:
    __slots__ = ("client", "connecting", "dead", "upstream")

    def __init__(self, client: _Side, upstream: _Side) -> None:
        self.client = client
        self.upstream = upstream
        self.connecting = True  # upstream connect() still in progress
        self.dead = False


class FaultProxy:
    """Threaded TCP proxy on 127.0.0.1 in front of ``upstream`` (``"host:port"``).

    Faults (they apply to current and new connections until changed):

    - :meth:`cut`: close every current connection at once; close new ones
      immediately after accepting them, until :meth:`restore`.
    - :meth:`drop_replies`: forward client->server bytes, silently discard
      server->client bytes (a request reaches the server, its reply is lost).
    - :meth:`blackhole`: accept and discard both directions, close nothing.
    - :meth:`hold`: read nothing, discard nothing: bytes arrive late, on restore.
    - :meth:`restore`: normal forwarding again.

    While bytes of a direction are being discarded, a close by the peer on that
    side is not passed on either (the other side just hears nothing), as in a real
    partition. Connections that lost a side that way are closed on :meth:`restore`.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self._upstream_addr = _parse_address(upstream)
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._thread: threading.Thread | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._lock = threading.Lock()
        self._tasks: list[tuple[Callable[[], None], threading.Event]] = []
        self._conns: set[_Conn] = set()
        self._mode = ProxyMode.FORWARD
        self._stopping = False
        self._closed = False
        self._port = 0
        self.accepted_total = 0

    # ------------------------------------------------------------ public API

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"`` to connect to (valid once started)."""
        if self._listener is None:
            raise RuntimeError("proxy not started")
        return f"127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("proxy not started")
        return self._port

    @property
    def mode(self) -> ProxyMode:
        return self._mode

    @property
    def connection_count(self) -> int:
        """Proxied connections currently open (at least one side still open)."""
        with self._lock:
            return len(self._conns)

    def start(self) -> FaultProxy:
        if self._closed:
            raise RuntimeError("proxy is closed")
        if self._thread is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.setblocking(False)
        self._port = int(listener.getsockname()[1])
        self._listener = listener
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(
            target=self._run, name=f"FaultProxy-{self._port}", daemon=True
        )
        self._thread.start()
        logger.debug("FaultProxy %s -> %s started", self.address, self.upstream)
        return self

    def cut(self) -> None:
        """Close all current connections; close new ones at once until :meth:`restore`."""
        self._set_mode(ProxyMode.CUT)

    def drop_replies(self) -> None:
        """Forward client->server, silently discard server->client bytes."""
        self._set_mode(ProxyMode.DROP_REPLIES)

    def blackhole(self) -> None:
        """Discard both directions without closing anything."""
        self._set_mode(ProxyMode.BLACKHOLE)

    def hold(self) -> None:
        """Stop reading both directions without losing or closing anything: the bytes
        wait in the sockets' buffers and are delivered late, on :meth:`restore` (a delay)."""
        self._set_mode(ProxyMode.HOLD)

    def restore(self) -> None:
        """Forward normally again (new and still-open current connections)."""
        self._set_mode(ProxyMode.FORWARD)

    def close(self) -> None:
        """Close every connection and the listener; join the worker thread."""
        if self._closed:
            return
        self._closed = True
        thread = self._thread
        if thread is not None:
            self._stopping = True
            self._wake()
            thread.join(timeout=10)
            if thread.is_alive():  # pragma: no cover - would be a bug
                logger.error("FaultProxy thread did not stop")
        self._teardown()
        logger.debug("FaultProxy on port %d closed", self._port)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = f"127.0.0.1:{self._port}" if self._listener is not None else "unstarted"
        return f"<FaultProxy {where} -> {self.upstream} {self._mode.value}>"

    # ------------------------------------------------------------ control plumbing

    def _set_mode(self, mode: ProxyMode) -> None:
        def apply() -> None:
            self._mode = mode
            self._apply_mode()

        self._call(apply)
        logger.debug("FaultProxy port %d mode -> %s", self._port, mode.value)

    def _call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the worker thread and wait for it (inline if not running)."""
        thread = self._thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            fn()
            return
        done = threading.Event()
        with self._lock:
            self._tasks.append((fn, done))
        self._wake()
        while not done.wait(0.05):
            if not thread.is_alive():
                return

    def _wake(self) -> None:
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")

    # ------------------------------------------------------------ worker thread

    def _run(self) -> None:
        selector = self._selector
        assert selector is not None
        try:
            while not self._stopping:
                for key, events in selector.select(timeout=1.0):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        conn, side = key.data
                        self._handle(conn, side, events)
                self._run_tasks()
        except Exception:  # pragma: no cover - never expected; keep the thread quiet
            logger.exception("FaultProxy worker failed")
        finally:
            self._run_tasks()
            self._teardown()

    def _drain_wake(self) -> None:
        sock = self._wake_r
        if sock is not None:
            with contextlib.suppress(OSError):
                while sock.recv(4096):
                    pass

    def _run_tasks(self) -> None:
        with self._lock:
            tasks, self._tasks = self._tasks, []
        for fn, done in tasks:
            try:
                fn()
            except Exception:  # pragma: no cover
                logger.exception("FaultProxy task failed")
            finally:
                done.set()

    def _teardown(self) -> None:
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
            tasks, self._tasks = self._tasks, []
        for conn in conns:
            self._close_conn(conn, remove=False)
        for _, done in tasks:
            done.set()
        selector, self._selector = self._selector, None
        if selector is not None:
            with contextlib.suppress(Exception):
                selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        assert self._listener is not None
        for _ in range(64):
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                logger.debug("FaultProxy accept failed: %s", exc)
                return
            self.accepted_total += 1
            if self._mode is ProxyMode.CUT:
                self._abort(sock)
                continue
            sock.setblocking(False)
            up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            up.setblocking(False)
            for s in (sock, up):
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = up.connect_ex(self._upstream_addr)
            if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
                logger.debug("FaultProxy upstream connect failed: %s", errno.errorcode.get(err))
                self._abort(sock)
                up.close()
                continue
            conn = _Conn(_Side(sock), _Side(up))
            with self._lock:
                self._conns.add(conn)
            self._update_interest(conn)

    @staticmethod
    def _abort(sock: socket.socket) -> None:
        """Close with a reset (SO_LINGER 0): the peer sees the connection die at once."""
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            sock.close()

    def _apply_mode(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            if self._mode is ProxyMode.CUT:
                self._close_conn(conn, abort=True)
                continue
            if self._mode is ProxyMode.HOLD:
                pass  # nothing is lost: reading stops (_update_interest)
            elif self._mode is ProxyMode.FORWARD:
                if conn.client.closed or conn.upstream.closed:
                    # A side went away while its close was hidden: nothing left to
                    # forward to.
                    self._close_conn(conn, abort=True)
                    continue
            else:
                # Bytes already queued towards a muted side are lost too.
                conn.client.outbuf.clear()
                if self._mode is ProxyMode.BLACKHOLE:
                    conn.upstream.outbuf.clear()
            self._update_interest(conn)

    def _delivers(self, from_client: bool) -> bool:
        """Whether bytes read from that side are passed on in the current mode."""
        if self._mode in (ProxyMode.FORWARD, ProxyMode.HOLD):
            return True  # (HOLD reads nothing; bytes read as it began are not lost)
        return self._mode is ProxyMode.DROP_REPLIES and from_client

    def _handle(self, conn: _Conn, name: str, events: int) -> None:
        from_client = name == "client"
        side, other = (conn.client, conn.upstream) if from_client else (conn.upstream, conn.client)
        if conn.dead or side.closed:
            return
        if not from_client and conn.connecting:
            if not events & selectors.EVENT_WRITE:
                return
            err = side.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                logger.debug("FaultProxy upstream connect failed: %s", errno.errorcode.get(err))
                self._close_conn(conn, abort=True)
                return
            conn.connecting = False
        if events & selectors.EVENT_WRITE:
            self._flush(conn, side)
        if events & selectors.EVENT_READ and not conn.dead and not side.eof:
            self._read(conn, from_client, side, other)
        if not conn.dead:
            self._maybe_finish(conn)
        if not conn.dead:
            self._update_interest(conn)

    def _read(self, conn: _Conn, from_client: bool, side: _Side, other: _Side) -> None:
        data: bytes | None
        try:
            data = side.sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = None  # reset by the peer
        delivers = self._delivers(from_client)
        if data:
            if delivers and not other.closed:
                other.outbuf += data
                self._flush(conn, other)
            return
        side.eof = True
        if not delivers:
            # This direction is muted: hide the close from the other side.
            self._close_side(side)
        elif data is None:
            self._close_conn(conn, abort=True)
        # A clean EOF is passed on (shutdown) by _maybe_finish once the bytes
        # queued for the other side are sent.

    def _flush(self, conn: _Conn, side: _Side) -> None:
        """Send what is queued for ``side`` (as much as the socket takes)."""
        if side.closed or (conn.connecting and side is conn.upstream):
            return
        while side.outbuf:
            try:
                sent = side.sock.send(side.outbuf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                if self._mode is ProxyMode.FORWARD:
                    self._close_conn(conn, abort=True)
                else:
                    self._close_side(side)
                return
            del side.outbuf[:sent]

    def _maybe_finish(self, conn: _Conn) -> None:
        """Pass clean EOFs on once flushed; close connections nothing can flow through."""
        for side, other in ((conn.client, conn.upstream), (conn.upstream, conn.client)):
            if (
                side.eof
                and not side.closed
                and not side.shut_peer
                and not other.closed
                and not other.outbuf
                and not (conn.connecting and other is conn.upstream)
            ):
                side.shut_peer = True
                with contextlib.suppress(OSError):
                    other.sock.shutdown(socket.SHUT_WR)
        client, upstream = conn.client, conn.upstream
        if client.eof and upstream.eof and not client.outbuf and not upstream.outbuf:
            self._close_conn(conn)

    def _update_interest(self, conn: _Conn) -> None:
        selector = self._selector
        if selector is None or conn.dead:
            return
        for name, side, other in (
            ("client", conn.client, conn.upstream),
            ("upstream", conn.upstream, conn.client),
        ):
            if side.closed:
                continue
            events = 0
            holding = self._mode is ProxyMode.HOLD
            if not side.eof and len(other.outbuf) < _MAX_BUFFER and not holding:
                events |= selectors.EVENT_READ
            if side.outbuf or (conn.connecting and side is conn.upstream):
                events |= selectors.EVENT_WRITE
            try:
                key: selectors.SelectorKey | None = selector.get_key(side.sock)
            except KeyError:
                key = None
            try:
                if not events:
                    if key is not None:
                        selector.unregister(side.sock)
                elif key is None:
                    selector.register(side.sock, events, (conn, name))
                elif key.events != events:
                    selector.modify(side.sock, events, (conn, name))
            except (KeyError, ValueError, OSError) as exc:
                logger.debug("FaultProxy selector update failed: %s", exc)

    def _close_side(self, side: _Side, abort: bool = False) -> None:
        if side.closed:
            return
        side.closed = True
        side.eof = True
        side.outbuf.clear()
        if self._selector is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(side.sock)
        if abort:
            self._abort(side.sock)
        else:
            with contextlib.suppress(OSError):
                side.sock.close()

    def _close_conn(self, conn: _Conn, *, abort: bool = False, remove: bool = True) -> None:
        conn.dead = True
        self._close_side(conn.client, abort)
        self._close_side(conn.upstream, abort)
        if remove:
            with self._lock:
                self._conns.discard(conn)

    # ------------------------------------------------------------ helpers for tests

    def wait_for_connections(self, count: int, timeout: float = 5.0) -> None:
        """Wait until at least ``count`` connections are open (TimeoutError if not)."""
        deadline = time.monotonic() + timeout
        while self.connection_count < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self!r}: {self.connection_count} connections, wanted {count}")
            time.sleep(0.01)
