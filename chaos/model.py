"""The normalized records the checker reads: the store's history, the clients' op
logs and the nemesis log. Readers (history_zk, history_etcd) and the runner build them;
the checker never talks to a store or to the library."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DeleteCause(enum.Enum):
    DELETE = "delete"  # an explicit delete of the entry
    SESSION_END = "session_end"  # ZooKeeper closeSession/expiry, etcd lease expiry/revoke
    # (PostgreSQL: the deleting transaction saw the entry's session expired or gone)


@dataclass(frozen=True)
class EntryCreated:
    pos: int  # zxid / revision / index of the change
    time: float | None  # wall clock (ZooKeeper txn time; etcd: the last clock tick)
    key: str
    token: int  # czxid / create_revision: the entry's identity together with key
    weight: int
    owner: str
    session: int  # ZooKeeper session id / etcd lease id


@dataclass(frozen=True)
class EntryDeleted:
    pos: int
    time: float | None
    key: str
    token: int
    cause: DeleteCause


@dataclass(frozen=True)
class EntryGranted:
    """The store's own record that it admitted an entry (PostgreSQL's ``held`` update);
    stores whose clients decide admission record none."""

    pos: int
    time: float | None
    key: str
    token: int


@dataclass(frozen=True)
class CapacitySet:
    pos: int
    time: float | None
    capacity: int


@dataclass(frozen=True)
class FencedWrite:
    """A write that landed through ``permit.transaction()`` (the value names its entry)."""

    pos: int
    time: float | None
    key: str
    token: int
    writer: str


@dataclass(frozen=True)
class Marker:
    """A key the runner writes to mark a phase (``quiesced``, ``end``) in the history."""

    pos: int
    time: float | None
    name: str


HistoryEvent = EntryCreated | EntryGranted | EntryDeleted | CapacitySet | FencedWrite | Marker


class OpKind(enum.Enum):
    ACQUIRE = "acquire"
    COMMIT = "commit"
    RELEASE = "release"
    SET_CAPACITY = "set_capacity"
    STATUS = "status"


class Outcome(enum.Enum):
    OK = "ok"
    TIMEOUT = "timeout"  # AcquireTimeout
    LOST = "lost"  # PermitLost (a refused fenced write)
    UNAVAILABLE = "unavailable"  # BackendUnavailable
    ERROR = "error"  # anything else: reported as a violation
    UNFINISHED = "unfinished"  # the process died inside the call


@dataclass(frozen=True)
class ClientOp:
    client: str  # the process incarnation, also the backend's owner string
    thread: int
    kind: OpKind
    start: float
    end: float | None
    outcome: Outcome
    bound: float  # seconds the call may take (its timeout + request bound + margin)
    key: str | None = None
    token: int | None = None
    detail: str = ""


class FaultKind(enum.Enum):
    KILL_CLIENT = "kill_client"
    PAUSE_CLIENT = "pause_client"
    KILL_LEADER = "kill_leader"
    KILL_MEMBER = "kill_member"
    RESTART_CLUSTER = "restart_cluster"
    CUT = "cut"
    BLACKHOLE = "blackhole"
    DROP_REPLIES = "drop_replies"
    DELAY = "delay"  # bytes held both ways, delivered late
    EXPIRE_SESSION = "expire_session"  # an operator expires a client's session (SQL stores)
    # Not injected: an election the runner saw by polling the members (chaos/leaders.py).
    # Elections move every session's or lease's deadline, like a killed leader does.
    LEADER_CHANGE = "leader_change"

    @property
    def server_side(self) -> bool:
        return self in (
            FaultKind.KILL_LEADER, FaultKind.KILL_MEMBER, FaultKind.RESTART_CLUSTER,
            FaultKind.LEADER_CHANGE,
        )  # fmt: skip

    @property
    def injected(self) -> bool:
        """True for what a nemesis does (false for what the runner only observes)."""
        return self is not FaultKind.LEADER_CHANGE


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    target: str  # client incarnation or member name
    start: float
    end: float  # when healed (restart done, SIGCONT sent, proxy restored, kill sent)


@dataclass(frozen=True)
class LeaderChange:
    """An election seen by polling the members (chaos/leaders.py): the cluster's term
    (etcd raft term, ZooKeeper epoch) went from ``old_term`` to ``new_term``, settled
    with ``new_leader`` leading. It happened between ``start``, the last poll that saw
    the old term, and ``end``, the first poll that saw the new one with a leader."""

    start: float
    end: float
    old_leader: str
    new_leader: str
    old_term: int
    new_term: int

    def as_fault(self) -> Fault:
        return Fault(FaultKind.LEADER_CHANGE, self.new_leader, self.start, self.end)


class ViolationKind(enum.Enum):
    OVER_CAPACITY = "over_capacity"
    WRITE_AFTER_DELETE = "write_after_delete"
    OVERTAKING = "overtaking"
    LEAK = "leak"
    SLOW_RELEASE = "slow_release"
    STALL = "stall"
    UNBOUNDED_CALL = "unbounded_call"
    UNEXPECTED_ERROR = "unexpected_error"
    LOST_WRITE = "lost_write"
    # Redis Sentinel: an acknowledged grant the promoted replica lacked (chaos/runner.py)
    LOST_GRANT = "lost_grant"
    BAD_HISTORY = "bad_history"


@dataclass(frozen=True)
class Violation:
    kind: ViolationKind
    detail: str
