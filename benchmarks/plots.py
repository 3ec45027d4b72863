"""PNG plots of the latency and herd figures (matplotlib, when installed)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .results import Results

LATENCY_PNG = "bench-latency.png"
HERD_PNG = "bench-herd.png"
COLORS = {"zookeeper": "#3366aa", "etcd": "#cc6633"}


def pyplot() -> Any:
    """matplotlib.pyplot with the file-only backend; ImportError when not installed."""
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def plain_log_axis(axis: Any, ticks: Sequence[float]) -> None:
    """A log axis labelled with plain numbers at ``ticks``."""
    ticker = importlib.import_module("matplotlib.ticker")
    axis.set_major_locator(ticker.FixedLocator(ticks))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def latency_plot(results: Results, path: Path) -> None:
    plt = pyplot()
    patches = importlib.import_module("matplotlib.patches")
    lines = importlib.import_module("matplotlib.lines")
    panels = [("uncontended acquire+release", results.latency), ("handoff", results.handoff)]
    panels = [(t, rows) for t, rows in panels if rows]
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5.4), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels, strict=True):
        rows = rows[::-1]
        y = list(range(len(rows)))
        low = min(r.median_ms for r in rows) / 2
        ax.barh(
            y,
            [r.median_ms - low for r in rows],
            left=low,
            alpha=0.85,
            color=[COLORS[r.backend] for r in rows],
        )
        ax.scatter([r.p99_ms for r in rows], y, marker="|", s=300, color="black", zorder=3)
        for yi, r in zip(y, rows, strict=True):
            text = f"{r.median_ms:.2f} ms" + (f" ({r.ratio:.2f}x)" if r.ratio == r.ratio else "")
            ax.annotate(
                text, (r.median_ms, yi), xytext=(4, -3), textcoords="offset points", fontsize=8
            )
        ax.set_yticks(y)
        ax.set_yticklabels([r.label for r in rows], fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(low, max(r.p99_ms for r in rows) * 1.5)
        plain_log_axis(ax.xaxis, [0.5, 1, 2, 5, 10, 20, 50, 100])
        ax.set_xlabel("milliseconds (log scale)")
        ax.set_title(title)
        ax.grid(axis="x", which="both", alpha=0.3)
    fig.legend(
        handles=[
            patches.Patch(color=COLORS["zookeeper"], label="ZooKeeper: median"),
            patches.Patch(color=COLORS["etcd"], label="etcd: median"),
            lines.Line2D([], [], color="black", marker="|", ls="", markersize=12, label="p99"),
        ],
        loc="lower center",
        ncol=3,
        fontsize=9,
        title="(x) = median / the floor of the same backend",
        title_fontsize=8,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def herd_plot(results: Results, path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    styles = {
        "ours-zk": ("semaphore-recipes", "o", "#3366aa"),
        "kazoo-sem": ("kazoo Semaphore", "s", "#aa3333"),
        "ours-etcd": ("semaphore-recipes", "o", "#cc6633"),
    }

    def series(impl: str) -> list[Any]:
        return sorted((r for r in results.herd if r.impl == impl), key=lambda r: r.waiters)

    ax = axes[0]
    for impl in ("ours-zk", "kazoo-sem"):
        rows = series(impl)
        if rows:
            name, marker, color = styles[impl]
            w = [r.waiters for r in rows]
            ax.plot(
                w, [r.packets_in for r in rows], marker=marker, color=color, label=f"{name}: in"
            )
            ax.plot(
                w,
                [r.packets_out for r in rows],
                marker=marker,
                color=color,
                ls="--",
                label=f"{name}: out",
            )
    ax.axhline(6, color="gray", ls=":", label="target <= 6")
    ax.set_title("ZooKeeper: packets per release")
    ax.set_ylim(bottom=0)
    ax = axes[1]
    for impl in ("ours-zk", "kazoo-sem"):
        rows = series(impl)
        if rows:
            name, marker, color = styles[impl]
            ax.plot(
                [r.waiters for r in rows],
                [max(r.response_bytes, 1.0) for r in rows],
                marker=marker,
                color=color,
                label=name,
            )
    ax.axhline(1024, color="gray", ls=":", label="target <= 1 KB")
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis, [100, 300, 1000, 3000, 10000, 30000, 100000])
    ax.set_title("ZooKeeper: response bytes per release")
    ax = axes[2]
    rows = series("ours-etcd")
    if rows:
        w = [r.waiters for r in rows]
        ax.plot(w, [r.packets_in for r in rows], marker="o", color="#cc6633", label="gRPC msgs in")
        ax.plot(
            w,
            [r.packets_out for r in rows],
            marker="o",
            color="#cc6633",
            ls="--",
            label="gRPC msgs out",
        )
        ax.plot(
            w, [r.notifications for r in rows], marker="^", color="#777777", label="watch events"
        )
    ax.set_title("etcd (semaphore-recipes): per release")
    ax.set_ylim(bottom=0)
    waiters = sorted({r.waiters for r in results.herd})
    for ax in axes:
        ax.set_xscale("log")
        plain_log_axis(ax.xaxis, waiters)
        ax.set_xlabel("blocked waiters W (capacity 2)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: Results, out: Path) -> None:
    """Write the plots that have data; note what was skipped and why."""
    try:
        pyplot()
    except ImportError as exc:
        why = f"matplotlib is not installed ({exc}); pip install -e '.[bench]'"
        results.skip(f"plots {LATENCY_PNG} and {HERD_PNG}", why)
        return
    for name, has_data, draw in (
        (LATENCY_PNG, bool(results.latency or results.handoff), latency_plot),
        (HERD_PNG, bool(results.herd), herd_plot),
    ):
        if has_data:
            draw(results, out / name)
            results.plots.append(name)
        else:
            results.skip(f"plot {name}", "its measurement was not run (or gave no rows)")
