"""``semaphore-recipes watch NAME``: the status, refreshed on its interval whatever happens.

A reader thread reads the status (one read at a time, each bounded by the URL's request
timeout) and the screen is redrawn every ``--interval`` from its last answer, whether or
not the read in flight came back: the view never freezes, and it says how old it is.

Connection loss: when a read fails, or has not answered ``interval`` + 0.5 s after it
started, the last table stays on screen marked "stale: store not answering since
HH:MM:SS (N s)" (``--json``: ``"stale": true`` and ``unanswered_since``), and the reader
tries again every interval until the store answers. A semaphore that no longer exists
(deleted, or the store lost its data) is shown as such and waited for. The watcher's
session holds nothing, so the library's session and permit warnings about it (lease
suspended, expired) are not shown; with ``-v`` they go to stderr, or under the table on
a terminal, never into it. A refused read (exit 77) or unreadable data (65) ends it.
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._core.status import Status
from ..client import Client
from ..errors import BackendUnavailable, SemaphoreNotFound
from ._common import PROG, dumps, status_json, status_table

STALE_MARGIN = 0.5  # seconds a read may take beyond the interval before the view is stale
MIN_INTERVAL = 0.05  # --interval 0: as fast as this
LOG_LINES = 5  # library messages kept under the table on a terminal (-v)


@dataclass(frozen=True)
class View:
    """What the screen shows at ``time``: the last answer of the store and how old it is.

    ``exists``: None before the first answer; ``status``: the last one read (kept while
    stale; None while the semaphore does not exist); ``read_at``: when the last answered
    read started; ``unanswered_since``: when the first read after it started that failed
    or is overdue (None: the view is current); ``error``: why the last read failed (None
    while it is only overdue); ``gone``: it existed earlier in this watch and no longer does.
    """

    name: str
    time: float
    exists: bool | None
    status: Status | None
    read_at: float | None
    unanswered_since: float | None
    error: str | None
    gone: bool

    @property
    def stale(self) -> bool:
        return self.unanswered_since is not None

    def key(self) -> object:
        """Equal for views that print alike (``--json`` and a pipe print on change)."""
        st = self.status
        shown = None if st is None else (st.capacity, st.holders, st.waiters)
        return (self.exists, shown, self.unanswered_since, self.error, self.gone)

    def document(self) -> dict[str, Any]:
        """The ``watch --json`` document (docs/cli.md)."""
        doc: dict[str, Any] = {"name": self.name, "exists": self.exists}
        if self.status is not None and self.read_at is not None:
            doc.update(status_json(self.status, self.read_at))
        doc.update(
            time=self.time,
            read_at=self.read_at,
            stale=self.stale,
            unanswered_since=self.unanswered_since,
            error=self.error,
        )
        return doc

    def lines(self, where: str, interval: float) -> list[str]:
        """The text view: a stale mark first when the store is not answering."""
        lines = []
        if self.unanswered_since is not None:
            since = time.strftime("%H:%M:%S", time.localtime(self.unanswered_since))
            why = f": {self.error}" if self.error else ""
            lines.append(
                f"stale: store not answering since {since} "
                f"({max(0.0, self.time - self.unanswered_since):.0f} s){why}; "
                f"retrying every {interval:g}s"
            )
            if self.read_at is not None:
                at = time.strftime("%H:%M:%S", time.localtime(self.read_at))
                lines.append(f"(the last answer, from {at}:)")
        if self.exists is None:
            if self.unanswered_since is None:
                lines.append(f"{self.name}: reading {where}...")
        elif not self.exists:
            if self.gone:
                lines.append(
                    f"{self.name}: no longer exists at {where} (deleted, or the store lost "
                    "its data); waiting for it to be created again"
                )
            else:
                lines.append(f"{self.name}: no such semaphore at {where} (yet); waiting")
        elif self.status is not None and self.read_at is not None:
            lines += status_table(self.status, self.read_at)
        return lines


class Reader:
    """Reads the status of ``name`` in a thread of its own, one read at a time, a new
    one every ``interval`` (at once after a read that took longer)."""

    def __init__(self, backend: Client, name: str, interval: float) -> None:
        self.backend = backend
        self.name = name
        self.interval = interval
        self.failure: BaseException | None = None  # not a lost store: the watch ends
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sem: Any = None
        self._exists: bool | None = None
        self._status: Status | None = None
        self._read_at: float | None = None
        self._seen = False
        self._failing_since: float | None = None
        self._error: str | None = None
        self._in_flight_since: float | None = None
        self.first_read = threading.Event()  # the first read ended (answered or not)
        self._thread = threading.Thread(target=self._run, name=f"watch {name}", daemon=True)

    def start(self) -> Reader:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No more reads (one in flight ends with the backend's close)."""
        self._stop.set()

    def view(self, now: float) -> View:
        with self._lock:
            unanswered = self._failing_since
            flight = self._in_flight_since
            overdue = flight is not None and now - flight > self.interval + STALE_MARGIN
            if unanswered is None and overdue:
                unanswered = flight
            return View(
                self.name,
                now,
                self._exists,
                self._status,
                self._read_at,
                unanswered,
                self._error if unanswered is not None else None,
                self._seen and self._exists is False,
            )

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            started = time.time()
            with self._lock:
                self._in_flight_since = started
            try:
                status = self._read()
            except BackendUnavailable as exc:
                with self._lock:
                    self._in_flight_since = None
                    if self._failing_since is None:
                        self._failing_since = started
                    self._error = str(exc) or type(exc).__name__
            except BaseException as exc:  # refused, unreadable, a bug: the watch ends
                if not self._stop.is_set():
                    self.failure = exc
                return
            else:
                with self._lock:
                    self._in_flight_since = None
                    self._failing_since = self._error = None
                    self._exists = status is not None
                    self._seen = self._seen or status is not None
                    self._status = status
                    self._read_at = started
            self.first_read.set()
            self._stop.wait(max(0.0, began + self.interval - time.monotonic()))

    def _read(self) -> Status | None:
        """The status, or None when the semaphore does not exist (any more)."""
        try:
            if self._sem is None:
                self._sem = self.backend.semaphore(self.name, create=False)
            return self._sem.status()  # type: ignore[no-any-return]
        except SemaphoreNotFound:
            self._sem = None
            return None


class ScreenLog(logging.Handler):
    """The library's messages (``-v``), kept for the lines under the redrawn table."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self.setFormatter(logging.Formatter(f"%(asctime)s {PROG}: %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record).replace("\n", " "))


def quiet_library(verbose: int, on_screen: bool) -> ScreenLog | None:
    """The watcher's session holds nothing: its lease and permit warnings are noise, so
    without ``-v`` only the library's errors are shown. On a terminal the messages go
    into a :class:`ScreenLog` (drawn under the table) instead of across the screen."""
    if verbose <= 0:
        logging.getLogger("semaphore_recipes").setLevel(logging.ERROR)
    if not on_screen:
        return None
    handler = ScreenLog()
    logging.getLogger().handlers[:] = [handler]
    return handler


def ticks(interval: float) -> Iterator[float]:
    """Wall-clock times, one every ``interval`` (monotonic schedule; a late tick is not
    made up for)."""
    step = max(interval, MIN_INTERVAL)
    due = time.monotonic()
    while True:
        yield time.time()
        due += step
        pause = due - time.monotonic()
        if pause < 0:
            due, pause = time.monotonic(), 0.0
        time.sleep(pause)


def watch(
    backend: Client,
    name: str,
    where: str,
    interval: float,
    as_json: bool,
    tty: bool,
    log: ScreenLog | None,
) -> None:
    """Until interrupted (KeyboardInterrupt) or the reader fails for good (raised)."""
    step = max(interval, MIN_INTERVAL)
    reader = Reader(backend, name, step).start()
    last: object = None
    try:
        reader.first_read.wait(step + STALE_MARGIN)  # the first view: an answer if one comes
        for now in ticks(interval):
            if reader.failure is not None:
                raise reader.failure
            view = reader.view(now)
            if view.exists is None and not view.stale:
                continue  # the first read is on its way
            stamp = time.strftime("%H:%M:%S", time.localtime(now))
            if as_json:
                if view.key() != last:
                    print(dumps(view.document()), flush=True)
            elif tty:
                header = f"every {interval:g}s: {where}  {stamp}"
                below = ["", *log.lines] if log is not None and log.lines else []
                screen = [header, "", *view.lines(where, interval), *below]
                sys.stdout.write("\x1b[H\x1b[J" + "\n".join(screen) + "\n")
                sys.stdout.flush()
            elif view.key() != last:
                print("\n".join([f"-- {stamp}", *view.lines(where, interval)]), flush=True)
            last = view.key()
    finally:
        reader.stop()
