"""The issue's targets, judged on one run's rows: met, missed, or not measured."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .results import HerdRow, LatencyRow, Results, WaitersRow

NONE = "-"


@dataclass(frozen=True)
class Verdict:
    figure: str
    kazoo_issue: str  # kazoo Semaphore, as the issue measured it
    kazoo_now: str  # kazoo Semaphore in this run
    goal: str
    ours_now: str
    verdict: str  # "met", "missed" or "not measured"


def ratio(value: float) -> str:
    return NONE if math.isnan(value) else f"{value:.2f}x"


def _row(rows: Sequence[LatencyRow], impl: str) -> LatencyRow | None:
    return next((r for r in rows if r.impl == impl), None)


def _latency(
    figure: str, issue: str, rows: Sequence[LatencyRow], ours: str, limit: float
) -> Verdict:
    mine, kazoo = _row(rows, ours), _row(rows, "kazoo-sem")
    kazoo_now = "n/a" if issue == "n/a" else (ratio(kazoo.ratio) if kazoo else NONE)
    goal = f"<= {limit:g}x"
    if mine is None or math.isnan(mine.ratio):
        return Verdict(figure, issue, kazoo_now, goal, NONE, "not measured")
    verdict = "met" if mine.ratio <= limit else "missed"
    return Verdict(figure, issue, kazoo_now, goal, ratio(mine.ratio), verdict)


def flat(small: float, big: float, slack: float) -> bool:
    """As ``tests/herd.py`` asserts: within 1.5x + slack of the value at the smallest W."""
    return big <= small * 1.5 + slack


def _ends(rows: Sequence[HerdRow], impl: str) -> tuple[HerdRow, HerdRow] | None:
    mine = sorted((r for r in rows if r.impl == impl), key=lambda r: r.waiters)
    return (mine[0], mine[-1]) if mine else None


def _herd(rows: Sequence[HerdRow]) -> list[Verdict]:
    ours, kazoo = _ends(rows, "ours-zk"), _ends(rows, "kazoo-sem")
    packets = ("packets per release at W=500 (in / out)", "8 / 11", "<= 6 / 6, flat in W")
    size = ("response bytes per release at W=500", "27 KB", "<= 1 KB, flat in W")
    kz_packets = f"{kazoo[1].packets_in:.1f} / {kazoo[1].packets_out:.1f}" if kazoo else NONE
    kz_bytes = f"{kazoo[1].response_bytes:.0f} B" if kazoo else NONE
    if ours is None:
        return [
            Verdict(*packets[:2], kz_packets, packets[2], NONE, "not measured"),
            Verdict(*size[:2], kz_bytes, size[2], NONE, "not measured"),
        ]
    small, big = ours
    at = "" if big.waiters == 500 else f" (here W={big.waiters})"
    ok = (
        big.packets_in <= 6
        and big.packets_out <= 6
        and flat(small.packets_in, big.packets_in, 2)
        and flat(small.packets_out, big.packets_out, 2)
    )
    measured = (
        f"{big.packets_in:.1f} / {big.packets_out:.1f} "
        f"(W={small.waiters}: {small.packets_in:.1f} / {small.packets_out:.1f})"
    )
    out = [
        Verdict(
            packets[0] + at, packets[1], kz_packets, packets[2], measured, "met" if ok else "missed"
        )
    ]
    ok = big.response_bytes <= 1024 and flat(small.response_bytes, big.response_bytes, 300)
    measured = f"{big.response_bytes:.0f} B (W={small.waiters}: {small.response_bytes:.0f} B)"
    out.append(
        Verdict(size[0] + at, size[1], kz_bytes, size[2], measured, "met" if ok else "missed")
    )
    return out


def _throughput(results: Results) -> Verdict:
    rows = {r.impl: r for r in results.throughput}
    mine, kazoo = rows.get("ours-zk"), rows.get("kazoo-sem")
    figure = ("throughput / raw create+delete loop", "0.19x")
    kazoo_now = ratio(kazoo.ratio) if kazoo else NONE
    if mine is None or math.isnan(mine.ratio):
        return Verdict(*figure, kazoo_now, ">= 0.6x", NONE, "not measured")
    verdict = "met" if mine.ratio >= 0.6 else "missed"
    ours = ratio(mine.ratio)
    ceiling = rows.get("ceiling-zk")
    if ceiling is not None and not math.isnan(ceiling.ratio):
        ours += f" (ceiling of a herd-free protocol: {ratio(ceiling.ratio)})"
    return Verdict(*figure, kazoo_now, ">= 0.6x", ours, verdict)


def verdicts(results: Results) -> list[Verdict]:
    return [
        _latency(
            "uncontended acquire+release / raw create+delete",
            "3.7x",
            results.latency,
            "ours-zk",
            1.3,
        ),
        _latency("handoff / raw predecessor-watch floor", "2.5x", results.handoff, "ours-zk", 1.2),
        *_herd(results.herd),
        _throughput(results),
        _latency(
            "etcd uncontended acquire+release / raw put+delete",
            "n/a",
            results.latency,
            "ours-etcd",
            1.3,
        ),
    ]


AIO_LIMIT = 1.3  # the issue's bound on both asyncio ratios
RSS_LIMIT_KB = 50.0  # per waiter
# gRPC and kazoo start a helper thread of their own now and then; a thread per waiter
# or per request would add hundreds
THREAD_SLACK = 2


def _aio_ratio(figure: str, rows: Sequence[LatencyRow], impl: str) -> Verdict:
    mine = _row(rows, impl)
    goal = f"<= {AIO_LIMIT:g}x"
    if mine is None or math.isnan(mine.ratio):
        return Verdict(figure, "n/a", "n/a", goal, NONE, "not measured")
    verdict = "met" if mine.ratio <= AIO_LIMIT else "missed"
    return Verdict(figure, "n/a", "n/a", goal, ratio(mine.ratio), verdict)


def _waiters(rows: Sequence[WaitersRow], backend: str) -> list[Verdict]:
    """FIFO, threads, RSS per waiter and requests per grant of W tasks in one loop; a
    row that stopped (RSS limit, or no end within its bound) misses all but threads."""
    mine = sorted((r for r in rows if r.backend == backend), key=lambda r: r.waiters)
    name = {"zookeeper": "ZooKeeper", "etcd": "etcd"}[backend]
    fifo = f"{name}: W tasks in one loop, all granted in FIFO order", "every W"
    threads = f"{name}: threads of the process at peak", f"independent of W (+-{THREAD_SLACK})"
    rss = f"{name}: RSS per waiter at the largest W", f"< {RSS_LIMIT_KB:g} KB"
    work = f"{name}: server requests / grant", "flat in W"
    if not mine:
        return [
            Verdict(figure, "n/a", "n/a", goal, NONE, "not measured")
            for figure, goal in (fifo, threads, rss, work)
        ]

    def verdict(figure: tuple[str, str], measured: str, ok: bool) -> Verdict:
        return Verdict(figure[0], "n/a", "n/a", figure[1], measured, "met" if ok else "missed")

    small, big = mine[0], mine[-1]
    span = f" (W={small.waiters}..{big.waiters})"
    peaks = [r.threads_peak for r in mine]
    per_waiter = f"{big.rss_per_waiter_kb:.1f} KB"
    return [
        verdict(
            fifo,
            ", ".join(
                f"W={r.waiters} stopped"
                if r.aborted
                else f"{r.grants}/{r.waiters} lag {r.fifo_lag}"
                for r in mine
            ),
            all(r.fifo for r in mine),
        ),
        verdict(
            threads,
            " / ".join(map(str, peaks)) + span,
            max(peaks) - min(peaks) <= THREAD_SLACK,
        ),
        verdict(
            (f"{rss[0]} (W={big.waiters})", rss[1]),
            f">= {per_waiter} (stopped)" if big.aborted else per_waiter,
            not big.aborted and big.rss_per_waiter_kb < RSS_LIMIT_KB,
        ),
        verdict(
            work,
            " / ".join(NONE if r.aborted else f"{r.requests:.1f}" for r in mine) + span,
            all(
                flat(small.requests, r.requests, 2) and flat(small.replies, r.replies, 2)
                for r in mine
            ),
        ),
    ]


def aio_verdicts(results: Results) -> list[Verdict]:
    """The asyncio face's targets (issue 14), per backend."""
    return [
        _aio_ratio(
            "ZooKeeper asyncio uncontended / asyncio raw create+delete",
            results.aio_latency,
            "aio-ours-zk",
        ),
        _aio_ratio(
            "etcd asyncio uncontended / asyncio raw put+delete",
            results.aio_latency,
            "aio-ours-etcd",
        ),
        _aio_ratio(
            "ZooKeeper asyncio handoff / asyncio watch floor", results.aio_handoff, "aio-ours-zk"
        ),
        _aio_ratio(
            "etcd asyncio handoff / asyncio watch floor", results.aio_handoff, "aio-ours-etcd"
        ),
        *_waiters(results.aio_waiters, "zookeeper"),
        *_waiters(results.aio_waiters, "etcd"),
    ]
