"""The report's numbers from the runs, and the one writer of every scenario's report.

Median/min/max records/s per contender and partition count, the pairwise ratios of Sharelake to
each peer, and the scaling cells: pure functions over `RunResult`s, plus the Markdown and table
formatting the reports share. `save_report` writes a scenario's report, Markdown and JSON.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.contenders.base import RunResult

BASE = "sharelake"


@dataclass
class Spread:
    """The records/s of the successful runs of one cell, and why the others failed."""

    rates: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else math.nan

    @property
    def low(self) -> float:
        return min(self.rates) if self.rates else math.nan

    @property
    def high(self) -> float:
        return max(self.rates) if self.rates else math.nan


def scheduled(results: list[RunResult]) -> list[RunResult]:
    """The throughput runs as a scheduler sees them (phase `scheduled`): their records over the
    seconds from the job's process start to its last Delta commit, JVM start included."""
    return [
        replace(r, phase="scheduled", seconds=r.details["scheduled_s"])
        for r in results
        if r.phase == "throughput" and r.ok and "scheduled_s" in r.details
    ]


def spreads(results: list[RunResult], phase: str) -> dict[tuple[str, int, int], Spread]:
    """(contender, partitions, members) -> Spread, over the runs of one phase."""
    out: dict[tuple[str, int, int], Spread] = defaultdict(Spread)
    for r in results:
        if r.phase != phase:
            continue
        cell = out[(r.contender, r.partitions, r.members)]
        if r.ok and math.isfinite(r.rate):
            cell.rates.append(r.rate)
        else:
            cell.failures.append(r.error or "no number")
    return dict(out)


def spread_cell(s: Spread | None) -> str:
    """A report's cell of rates: median (min - max), how many runs failed; `not run`, or `failed` if all did."""
    if s is None:
        return "not run"
    if not s.rates:
        return "failed"
    cell = f"{fmt_rate(s.median)} ({fmt_rate(s.low)} - {fmt_rate(s.high)})"
    return cell + (f", {len(s.failures)} failed" if s.failures else "")


def pairwise_ratios(results: list[RunResult], peer: str, partitions: int, phase: str = "throughput") -> Spread:
    """Sharelake / peer for each round of a phase (run i of one against run i of the other)."""

    def rates(name: str) -> list[float]:
        return [r.rate for r in results if r.phase == phase and r.contender == name and r.partitions == partitions]

    ratios = Spread()
    for a, b in zip(rates(BASE), rates(peer), strict=False):
        if math.isfinite(a) and math.isfinite(b) and b > 0:
            ratios.rates.append(a / b)
        else:
            ratios.failures.append("a run of either side failed")
    return ratios


def fmt_rate(x: float) -> str:
    return "failed" if not math.isfinite(x) else f"{x:,.0f}"


def fmt(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:,.{digits}f}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def kv_table(pairs: Mapping[str, str], header: tuple[str, str] = ("", "")) -> str:
    """A two-column markdown table of `pairs` (the machine's facts, a scenario's settings)."""
    return md_table(list(header), [[k, v] for k, v in pairs.items()])


def table_report(
    title: str, table: tuple[list[str], list[list[str]]], facts: dict[str, str], sections: Sequence[str] = ()
) -> str:
    """A report that is one table: `# title`, the table, then `sections` (markdown, in order) and a
    line of the machine's facts (`bench.layouts`, `bench.upserts`, `bench.poison_storm`)."""
    text = f"# {title}\n\n" + md_table(*table) + "\n\n" + "".join(s.rstrip("\n") + "\n\n" for s in sections)
    return text + "Machine: " + ", ".join(f"{k} {v}" for k, v in facts.items()) + "\n"


def runs_data(runs: Sequence[Any], summary: dict[str, Any] | None = None) -> Any:
    """A report's JSON of its runs (dataclasses): the list, or `{"summary": ..., "runs": [...]}`."""
    data = [asdict(r) for r in runs]
    return data if summary is None else {"summary": summary, "runs": data}


def save_report(results_dir: Path, stem: str, markdown: str, data: Any) -> Path:
    """Every scenario's report: `markdown` as `<stem>.md` and `data` as `<stem>.json` in `results_dir`
    (created if missing); the markdown's path, which it prints."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{stem}.md"
    path.write_text(markdown)
    path.with_suffix(".json").write_text(json.dumps(data, indent=2, default=str))
    print(f"bench: report written to {path}", flush=True)
    return path


def finite_median(values: Sequence[float]) -> float:
    """The median of the finite values; NaN when there are none (a cell whose runs all failed)."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def finite_or_none(x: float) -> float | None:
    """For JSON: NaN and infinities become null."""
    return x if math.isfinite(x) else None


def finite_values(d: Mapping[str, Any]) -> dict[str, Any]:
    """For JSON: the float values NaN and infinities become null."""
    return {k: finite_or_none(v) if isinstance(v, float) else v for k, v in d.items()}
