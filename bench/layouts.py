"""Table layouts against the plain table: `python -m bench layouts [--records N] [--partitions P] [--rounds R]`.

Run on its own (not a phase of `bench.run`). One broker, one topic holding the workload's JSON
backlog (`devkit.workload`: `ts` one second apart per record, `kind` one of 4); per round, each
layout in turn (interleaved round by round), one Sharelake job drains the whole topic until drained
into a fresh table with a fresh share group:

- `plain`: neither partitioned nor clustered (the default);
- `by_kind`: partitioned by `kind` (4 values);
- `by_day`: partitioned by a generated `day = CAST(ts AS DATE)` (one per 86,400 records);
- `clustered`: liquid clustering by `user`.

Each run gives the scheduled rate (process start to last commit), the rate in the job's own window
(`bench.contenders.sharelake`), the summed `write` step, and the data files of each commit (from
the Delta log). Every table is checked after the rounds: rows = the backlog, no (topic, partition,
offset) twice. Writes `bench/results/<stamp>-layouts.md` and `.json`.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.contenders.base import RunContext
from bench.contenders.sharelake import result_of, start_sharelake
from bench.figures import finite_median, fmt_rate, runs_data, save_report, table_report
from bench.harness import backlog, stamp, work_folder
from bench.machine import machine_facts
from bench.settings import BenchSettings, add_drain_arguments, drain_settings
from bench.verify import check_exactly_once
from devkit.delta_log import added_files
from sharelake.testing.kafka_broker import EmbeddedKafka

HELP = "table layouts (partitioned, by a generated column, clustered) against the plain table, one backlog each"
log = logging.getLogger(__name__)

LAYOUTS: dict[str, tuple[str, ...]] = {
    "plain": (),
    "by_kind": ('delta.partition_by=["kind"]',),
    "by_day": ('delta.partition_by=["day"]', "delta.generated_columns.day=CAST(ts AS DATE)"),
    "clustered": ('delta.cluster_by=["user"]',),
}


@dataclass
class LayoutRun:
    layout: str
    round: int
    ok: bool = False
    error: str = ""
    scheduled_rate: float = float("nan")  # rows / (process start -> last commit)
    window_rate: float = float("nan")  # the job's own window (bench.contenders.sharelake)
    write_s: float = float("nan")  # the sink's write step, summed over batches
    files_per_commit: list[int] = field(default_factory=list)
    rows: int = 0
    duplicates: int = 0
    table: str = ""


def files_per_commit(table: Path) -> list[int]:
    """The data files each commit of the table added, in version order (commits adding none left out)."""
    per_version = Counter(added_files(table).values())
    return [per_version[v] for v in sorted(per_version)]


def run_layout(kafka: EmbeddedKafka, s: BenchSettings, topic: str, name: str, i: int, work: Path) -> LayoutRun:
    ctx = RunContext(kafka.bootstrap, topic, s.partitions[0], s.records, 0, work / f"{name}-{i}", s, "layouts")
    job = start_sharelake(ctx, "until-drained", extra_sets=LAYOUTS[name])
    result = result_of(ctx, job, job.wait(s.run_timeout_s))
    run = LayoutRun(name, i, ok=result.ok, error=result.error, table=str(job.table))
    if result.ok:
        run.window_rate = result.rate
        run.scheduled_rate = s.records / float(result.details.get("scheduled_s") or float("nan"))
        run.write_s = float(result.details.get("write_s") or float("nan"))
        run.files_per_commit = files_per_commit(job.table)
    return run


def configure(p: argparse.ArgumentParser) -> None:
    add_drain_arguments(p)


settings = drain_settings


def run(args: argparse.Namespace) -> int:
    s = settings(args)
    at = stamp()
    facts = machine_facts()
    runs: list[LayoutRun] = []
    with work_folder(s.work_dir, f"{at.file}-layouts", s.keep_work) as work:
        with backlog(work, "layouts", s.partitions[0], s.records) as kafka:
            for i in range(s.runs):
                for name in LAYOUTS:
                    runs.append(run_layout(kafka, s, "layouts", name, i, work))
                    log.info("%s round %d: %s", name, i, asdict(runs[-1]))
        check_exactly_once(runs, lambda r: s.records)
    rows = []
    base = [r.scheduled_rate for r in runs if r.layout == "plain" and r.ok]
    for name in LAYOUTS:
        mine = [r for r in runs if r.layout == name and r.ok]
        median = finite_median([r.scheduled_rate for r in mine])
        rows.append(
            [
                name,
                " ".join(LAYOUTS[name]) or "(none)",
                fmt_rate(median),
                f"{median / finite_median(base):.2f}" if mine and base else "nan",
                ", ".join(f"{r.write_s:.1f}" for r in mine),
                "; ".join(str(r.files_per_commit) for r in mine),
                "ok" if len(mine) == s.runs else "FAILED: " + "; ".join(r.error[:200] for r in runs if not r.ok),
            ]
        )
    head = ["layout", "keys", "scheduled records/s (median)", "/ plain", "write s per run", "files per commit"]
    head.append("tables")
    title = f"Table layouts: {s.records:,} JSON records on {s.partitions[0]} partitions, {s.runs} rounds"
    save_report(s.results_dir, f"{at.file}-layouts", table_report(title, (head, rows), facts), runs_data(runs))
    return 0 if all(r.ok for r in runs) else 1
