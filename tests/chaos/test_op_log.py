"""The clients' op logs as the checker reads them: a call without an end line never
returned, and a line cut short by a kill -9 is skipped."""

from __future__ import annotations

from pathlib import Path

from chaos.client import OpLog
from chaos.fleet import read_ops
from chaos.model import OpKind, Outcome


def test_op_log_round_trip_and_a_line_cut_by_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "ops-c0.0.jsonl"
    log = OpLog(str(path), "c0.0")
    done = log.start(1, OpKind.ACQUIRE, 7.5)
    log.end(done, Outcome.OK, key="k", token=42, w=2)
    log.start(2, OpKind.COMMIT, 5.0)  # the process died inside this call
    with path.open("ab") as raw:
        raw.write(b'{"ev":"end","id":1,"ts":')  # the line being written at the kill
    first, second = read_ops(path, "c0.0")
    assert (first.kind, first.outcome, first.key, first.token, first.bound, first.thread) == (
        OpKind.ACQUIRE, Outcome.OK, "k", 42, 7.5, 1,
    )  # fmt: skip
    assert first.end is not None and first.end >= first.start
    assert (second.kind, second.outcome, second.end) == (OpKind.COMMIT, Outcome.UNFINISHED, None)
