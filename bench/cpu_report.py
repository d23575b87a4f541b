"""The report's CPU section: what a record costs each process, per Delta contender of the throughput phase.

Every throughput run carries the CPU seconds its processes spent (`bench.run.run_counted`,
`devkit.proccpu`: `cpu_<kind>_s` in its details); this module turns them into CPU seconds per
million records, the median over a cell's runs, as a Markdown table and as JSON.
"""

from __future__ import annotations

from typing import Any

from bench.contenders import LABELS, RunResult
from bench.figures import finite_median, finite_or_none, fmt, md_table
from bench.settings import BenchSettings
from devkit.proccpu import KINDS

COLUMNS = (*KINDS, "total")
HEADERS = ("broker", "driver Python", "driver JVM", "executors", "other", "total")
MILLION = 1_000_000

HOW = (
    "CPU seconds (user + system) per million records drained, the median over the runs, by process, from "
    "`/proc` (`devkit/proccpu.py`): the broker's CPU over the contender's run (the broker is shared, so this is "
    "its work for this contender); the driver's Python; the driver's JVM without its executor threads; the "
    "executors, which in local mode are the JVM's task threads (`Executor task ...`, read per thread from "
    "`/proc/<pid>/task/<tid>/stat`, an ended thread kept at its last reading) and Spark's Python workers; "
    "other: the shell wrappers, Spark's launcher JVM and what ran after a process's last sample (0.5 s apart), "
    "from the job's reaped children's rusage, which makes the job's total exact. The window is the whole run, "
    "from the process start to its exit, so start-up counts: the records/s windows above do not hold all of it."
)


def per_million(r: RunResult) -> dict[str, float]:
    """A run's CPU seconds per million of the records it drained, by column; empty without a count."""
    if not r.ok or not r.expected or "cpu_total_s" not in r.details:
        return {}
    return {c: r.details[f"cpu_{c}_s"] * MILLION / r.expected for c in COLUMNS}


def cells(results: list[RunResult], s: BenchSettings) -> list[tuple[str, int, int, dict[str, float]]]:
    """(contender, partitions, runs counted, column -> median per million) of each Delta contender's cell."""
    out = []
    for name in s.contenders:
        for p in s.partitions:
            runs = [
                per_million(r)
                for r in results
                if r.phase == "throughput" and r.contender == name and r.partitions == p and r.table is not None
            ]
            counted = [m for m in runs if m]
            if counted:
                medians = {c: finite_median([m[c] for m in counted]) for c in COLUMNS}
                out.append((name, p, len(counted), medians))
    return out


def cpu_section(results: list[RunResult], s: BenchSettings) -> list[str]:
    """The section's Markdown lines; none when no run was counted."""
    rows = cells(results, s)
    if not rows:
        return []
    md = ["### CPU per million records, by process\n", HOW + "\n"]
    table = [
        [LABELS.get(name, name), str(p), str(n), *[fmt(medians[c], 1) for c in COLUMNS]] for name, p, n, medians in rows
    ]
    md.append(md_table(["contender", "partitions", "runs", *HEADERS], table) + "\n")
    md.append("Each column is its own median, so a total need not be the sum of the columns above it.\n")
    return md


def cpu_json(results: list[RunResult], s: BenchSettings) -> list[dict[str, Any]]:
    """The same cells for the JSON report (each run's seconds are in its details)."""
    return [
        {
            "contender": name,
            "partitions": p,
            "runs": n,
            "cpu_s_per_million": {c: finite_or_none(v) for c, v in medians.items()},
        }
        for name, p, n, medians in cells(results, s)
    ]
