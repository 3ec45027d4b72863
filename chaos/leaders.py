"""Elections the nemesis did not inject: the runner polls every member for its term
(etcd raft term, ZooKeeper epoch) and the leader it knows, and logs each change of the
cluster's term to ``leaders.jsonl`` in the run directory.

An election moves every session's or lease's deadline (etcd's lessor gives every lease
a full TTL again on the new leader; ZooKeeper's new leader re-validates the sessions),
so the checker treats each one as a server fault, like a killed leader. Most elections
follow an injected kill or restart; the others (a member starved of CPU misses
heartbeats and campaigns) are *spontaneous*: :func:`spontaneous` tells them apart, and
the run's report lists them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .model import Fault, LeaderChange

logger = logging.getLogger(__name__)

LOG_NAME = "leaders.jsonl"
POLL_INTERVAL = 0.25
# An injected server fault is healed once some member leads again (chaos/injector.py);
# an election it set off can still settle a little later (a revived member campaigning).
AFTERMATH = 1.0


@dataclass(frozen=True)
class MemberView:
    """What one member says: its term and the leader it knows in that term (None: it
    knows none, e.g. while an election runs)."""

    member: str
    term: int
    leader: str | None


@dataclass(frozen=True)
class LeaderView:
    term: int
    leader: str


def settle(views: Iterable[MemberView]) -> LeaderView | None:
    """The cluster's view: the highest term any member answered with, if the members in
    that term agree on one leader (None while no member answers or an election runs)."""
    views = list(views)
    if not views:
        return None
    term = max(v.term for v in views)
    leaders = {v.leader for v in views if v.term == term and v.leader is not None}
    return LeaderView(term, leaders.pop()) if len(leaders) == 1 else None


class LeaderWatch:
    """Polls ``probe`` every ``interval`` seconds in a thread and records each change of
    the settled term as a :class:`LeaderChange` (also appended to ``log_path`` at once,
    so a run that dies keeps what was seen). The first settled view is the baseline.

    A change's window is conservative: from the start of the last poll that saw the old
    term to the end of the first poll that saw the new one settled. Polls that get no
    settled answer (members down, an election running) widen the window.
    """

    def __init__(
        self,
        probe: Callable[[], Sequence[MemberView]],
        log_path: Path,
        *,
        interval: float = POLL_INTERVAL,
    ) -> None:
        self.probe = probe
        self.log_path = log_path
        self.interval = interval
        self.changes: list[LeaderChange] = []
        self.error: BaseException | None = None
        self._settled: LeaderView | None = None
        self._seen_at = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-watch", daemon=True)

    @property
    def current(self) -> LeaderView | None:
        """The last settled view (None until the members first agree on a leader)."""
        return self._settled

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling (idempotent); :attr:`error` holds what ended the thread, if anything."""
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.interval):
                started = time.time()
                views = self.probe()
                self.observe(views, started, time.time())
        except BaseException as exc:  # reported by the runner
            logger.exception("the leader watch failed")
            self.error = exc

    def observe(
        self, views: Iterable[MemberView], started: float, finished: float
    ) -> LeaderChange | None:
        """Take one poll's answers (asked from ``started`` to ``finished``)."""
        view = settle(views)
        if view is None:
            return None
        old = self._settled
        if old is None or view.term == old.term:
            self._settled, self._seen_at = old or view, started
            return None
        if view.term < old.term:
            return None  # a member that has not caught up yet, alone in answering
        change = LeaderChange(self._seen_at, finished, old.leader, view.leader, old.term, view.term)
        self._settled, self._seen_at = view, started
        self.changes.append(change)
        logger.warning(
            "leader change: %s (term %d) -> %s (term %d), between %.3f and %.3f",
            old.leader, old.term, view.leader, view.term, change.start, change.end,
        )  # fmt: skip
        with self.log_path.open("a") as log:
            log.write(json.dumps({"kind": "leader_change", **asdict(change)}) + "\n")
        return change


def read_changes(rundir: Path) -> list[LeaderChange]:
    """The leader changes logged in a run directory (none in runs kept before the
    campaign watched for elections: they have no log)."""
    path = rundir / LOG_NAME
    if not path.exists():
        return []
    changes = []
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        doc.pop("kind")
        changes.append(LeaderChange(**doc))
    return changes


def spontaneous(
    changes: Iterable[LeaderChange], faults: Iterable[Fault], aftermath: float = AFTERMATH
) -> list[LeaderChange]:
    """The changes that no injected server fault explains: their window meets no
    injected kill or restart (nor the ``aftermath`` seconds after its heal)."""
    injected = [
        (f.start, f.end + aftermath) for f in faults if f.kind.injected and f.kind.server_side
    ]
    return [c for c in changes if not any(a <= c.end and c.start <= b for a, b in injected)]
