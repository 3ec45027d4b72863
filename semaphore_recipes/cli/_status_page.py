"""The exporter's status page, ``/``: each semaphore's holders and waiters, as HTML.

One page of plain HTML and a little CSS, no script and no framework: it reloads itself
(``<meta http-equiv="refresh">``) every ``refresh`` seconds. It is made from the
exporter's own readings (``StatusCollector.readings``), so a page costs the store no
more reads than a scrape: at most one per semaphore per ``--min-interval``. Rows are
those of ``status --json`` in queue order (holders first), with state, permits, token,
slots, age and owner; a semaphore whose last read failed is marked *stale* with the
last values read, and one never read (missing, unreachable) says so. Everything shown
is escaped: owners and names come from the store.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping

from .._core.status import Status
from ._common import format_age, status_rows

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin: 1.2em 0 0.2em; }
table { border-collapse: collapse; min-width: 60%; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #ddd; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.holding td.state { color: #1a7f37; font-weight: 600; }
tr.waiting td.state { color: #9a6700; }
.stale { color: #cf222e; font-weight: 600; } .note { color: #666; }
"""


def status_page(
    readings: Mapping[str, tuple[Status | None, bool]],
    where: str,
    refresh: float,
    now: float | None = None,
) -> str:
    """The page for ``readings`` (name -> last status read, or None; whether the last
    read worked), sorted by name, made at ``now`` (Unix time)."""
    now = time.time() if now is None else now
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{max(1, round(refresh))}">',
        f"<title>semaphores at {_e(where)}</title><style>{STYLE}</style></head><body>",
        f"<h1>Semaphores at {_e(where)}</h1>",
        f'<p class="note">as of {when}; this page reloads every {max(1, round(refresh))} s</p>',
    ]
    if not readings:
        parts.append('<p class="note">no semaphores</p>')
    for name, (status, up) in sorted(readings.items()):
        parts.append(_semaphore(name, status, up, now))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _semaphore(name: str, status: Status | None, up: bool, now: float) -> str:
    stale = "" if up else ' <span class="stale">stale: the last read failed</span>'
    head = f'<section class="semaphore" data-name="{_e(name)}"><h2>{_e(name)}{stale}</h2>'
    if status is None:
        return head + '<p class="note">not read (no such semaphore, or no answer)</p></section>'
    free = max(0, status.capacity - status.used)
    summary = (
        f'<p class="summary">capacity {status.capacity}, {status.used} in use, {free} free; '
        f"{len(status.holders)} holding, {len(status.waiters)} waiting</p>"
    )
    rows = [
        f'<tr class="{state}" data-token="{e.token}">'
        f'<td class="n">{pos}</td><td class="state">{state}</td>'
        f'<td class="n">{e.permits}</td><td class="n token">{e.token}</td>'
        f'<td class="slots">{",".join(map(str, e.slots)) or "-"}</td>'
        f'<td class="n">{format_age(now - e.since)}</td><td class="owner">{_e(e.owner)}</td></tr>'
        for pos, state, e in status_rows(status)
    ]
    table = (
        "<table><thead><tr><th>#</th><th>state</th><th>permits</th><th>token</th>"
        "<th>slots</th><th>age</th><th>owner</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        if rows
        else '<p class="note">nobody holds or waits</p>'
    )
    return head + summary + table + "</section>"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
