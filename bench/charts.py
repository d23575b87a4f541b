"""The report's PNG charts (matplotlib, no display): throughput per contender and partition count,
Sharelake's latency distribution, and the members scaling.

Called by `bench.run` after `bench.figures`; each function writes one file and returns its path.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from bench.figures import Spread


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


def latency_chart(commit_ms: np.ndarray, p50: float, p99: float, title: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if len(commit_ms):
        ax.hist(commit_ms, bins=min(100, max(10, len(commit_ms) // 50)), color="tab:blue", alpha=0.8)
        for q, v, style in (("p50", p50, "--"), ("p99", p99, ":")):
            ax.axvline(v, color="tab:red", linestyle=style, label=f"{q} {v:,.0f} ms")
        ax.legend()
    ax.set_xlabel("produce -> Delta commit (ms)")
    ax.set_ylabel("records")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
