"""``run``'s position line: rewritten in place on a terminal, a line per change elsewhere."""

from __future__ import annotations

import io

from semaphore_recipes import Position
from semaphore_recipes.cli._position_line import PositionLine


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _at(ahead: int, holders: int, waited: float) -> Position:
    return Position(ahead, 2 * ahead, holders, holders, 3, waited)


def test_a_terminal_gets_one_line_rewritten_at_each_report_and_ended() -> None:
    out = _Terminal()
    line = PositionLine("jobs", out)
    for position in (_at(1, 3, 0.2), _at(1, 3, 1.2), _at(0, 2, 2.2)):
        line(position)
    line.end()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    shown = text.rstrip("\n").split("\r")[1:]
    assert shown == [
        "waiting for 'jobs': 1 waiting ahead (2 permits), 3 holders (3/3 permits), 0 s",
        "waiting for 'jobs': 1 waiting ahead (2 permits), 3 holders (3/3 permits), 1 s",
        "waiting for 'jobs': next in line, 2 holders (2/3 permits), 2 s".ljust(77),
    ]


def test_elsewhere_a_line_per_change_of_place_and_nothing_to_end() -> None:
    out = io.StringIO()
    line = PositionLine("jobs", out)
    for position in (_at(1, 3, 0.2), _at(1, 3, 1.2), _at(0, 1, 2.2)):
        line(position)
    line.end()
    assert out.getvalue().splitlines() == [
        "waiting for 'jobs': 1 waiting ahead (2 permits), 3 holders (3/3 permits), 0 s",
        "waiting for 'jobs': next in line, 1 holder (1/3 permits), 2 s",
    ]


def test_no_report_no_output() -> None:
    out = _Terminal()
    PositionLine("jobs", out).end()
    assert out.getvalue() == ""
