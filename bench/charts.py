"""The report's PNG charts (matplotlib, no display), one file per function, its path returned.

Throughput per contender and partition count, the latency phase's p50/p99 per window over the run and
its whole-run distribution (every latency contender on one chart), and the members scaling.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

from bench.figures import Spread
from bench.verify import Window


def throughput_chart(
    cells: dict[tuple[str, int, int], Spread], contenders: list[str], labels: dict[str, str], path: Path
) -> Path:
    partitions = sorted({p for (_, p, _) in cells})
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.8 / max(1, len(contenders))
    x = np.arange(len(partitions))
    for i, name in enumerate(contenders):
        spreads = [
            next((s for (c, p, _), s in cells.items() if c == name and p == part), Spread()) for part in partitions
        ]
        med = [s.median if math.isfinite(s.median) else 0.0 for s in spreads]
        err = [
            [m - s.low if math.isfinite(s.low) else 0.0 for m, s in zip(med, spreads, strict=True)],
            [s.high - m if math.isfinite(s.high) else 0.0 for m, s in zip(med, spreads, strict=True)],
        ]
        bars = ax.bar(x + (i - (len(contenders) - 1) / 2) * width, med, width, yerr=err, capsize=3, label=labels[name])
        ax.bar_label(bars, labels=[f"{m:,.0f}" if m else "failed" for m in med], fontsize=7, padding=2)
    ax.set_xticks(x, [f"{p} partition{'s' if p > 1 else ''}" for p in partitions])
    ax.set_ylabel("records/s (median; bars: min-max)")
    ax.set_title("Drain throughput per contender")
    positive = [s.median for s in cells.values() if math.isfinite(s.median) and s.median > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")
PLAIN = FuncFormatter(lambda v, _: f"{v:g}")  # 0.5, 1, 10 rather than 10^0 on a log axis


def _latency_axis(ax: Axes, values_s: list[float]) -> None:
    """Seconds on the y axis, logarithmic when the values span more than 30x."""
    positive = [v for v in values_s if math.isfinite(v) and v > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(PLAIN)
    else:
        ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")


def latency_windows_chart(series: dict[str, list[Window]], window_s: float, title: str, path: Path) -> Path:
    """p50 (solid) and p99 (dashed) per window of produce time over the run, one colour per contender."""
    fig, ax = plt.subplots(figsize=(10, 5))
    seen: list[float] = []
    ends = [w.end_s for windows in series.values() for w in windows]
    if ends:
        ax.set_xlim(0, max(ends))
    for color, (label, windows) in zip(COLORS, series.items(), strict=False):
        kept = [w for w in windows if w.rows]
        x = [(w.start_s + w.end_s) / 2 for w in kept]
        for q, style, marker in (("p50", "-", "o"), ("p99", "--", "^")):
            y = [(w.p50_ms if q == "p50" else w.p99_ms) / 1000 for w in kept]
            ax.plot(x, y, linestyle=style, marker=marker, markersize=3, color=color, label=f"{label} {q}")
            seen += y
    _latency_axis(ax, seen)
    ax.set_xlabel(f"seconds since the first measured record was produced ({window_s:g} s windows, by produce time)")
    ax.set_ylabel("produce -> Delta commit (s)")
    return _save(fig, ax, title, path)


def latency_cdf_chart(samples: dict[str, np.ndarray], title: str, path: Path) -> Path:
    """The whole run's distribution per contender (share of rows at or below a latency), in seconds."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    seen: list[float] = []
    for color, (label, ms) in zip(COLORS, samples.items(), strict=False):
        if not len(ms):
            continue
        q = np.linspace(0, 100, 1001)
        x = np.percentile(ms, q) / 1000
        ax.plot(x, q / 100, color=color, label=label)
        for pct, style in ((50, ":"), (99, "--")):
            v = float(np.percentile(ms, pct)) / 1000
            ax.axvline(v, color=color, linestyle=style, alpha=0.7, label=f"{label} p{pct} {v:,.2f} s")
        seen += [float(x[0]), float(x[-1])]
    positive = [v for v in seen if v > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(PLAIN)
    ax.set_xlabel("produce -> Delta commit (s)")
    ax.set_ylabel("share of measured rows")
    ax.set_ylim(0, 1.01)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, ax, title, path)


def scaling_chart(cells: dict[tuple[int, int], Spread], path: Path) -> Path:
    """cells: (partitions, members) -> Spread of Sharelake's records/s."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for part in sorted({p for p, _ in cells}):
        members = sorted(m for p, m in cells if p == part)
        ax.plot(members, [cells[(part, m)].median for m in members], marker="o", label=f"{part} partition(s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("pump.members")
    ax.set_ylabel("records/s (median)")
    ax.set_title("Sharelake: members scaling")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _save(fig: Any, ax: Any, title: str, path: Path) -> Path:
    """Title, legend, layout; write the PNG and free the figure."""
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
