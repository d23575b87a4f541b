"""Table layouts against the plain table: `python -m bench.layouts [--records N] [--partitions P] [--rounds R]`.

Run on its own (not a phase of `bench.run`). One broker, one topic holding the workload's JSON
backlog (`bench.workload`: `ts` one second apart per record, `kind` one of 4); per round, each
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
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from app.testing.kafka_broker import EmbeddedKafka
from bench.contenders.base import RunContext
from bench.contenders.sharelake import result_of, start_sharelake
from bench.figures import fmt_rate, save_report
from bench.machine import machine_facts
from bench.settings import RESULTS_DIR, WORK_ROOT, BenchSettings
from bench.verify import check_table, open_spark
from bench.workload import produce_backlog
from devkit.delta_log import added_files

log = logging.getLogger("bench")

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


def files_per_commit(table: Path) -> list[int]:
    """The data files each commit of the table added, in version order (commits adding none left out)."""
    per_version = Counter(added_files(table).values())
    return [per_version[v] for v in sorted(per_version)]


def run_layout(kafka: EmbeddedKafka, s: BenchSettings, topic: str, name: str, i: int, work: Path) -> LayoutRun:
    ctx = RunContext(kafka.bootstrap, topic, s.partitions[0], s.records, 0, work / f"{name}-{i}", s, "layouts")
    job = start_sharelake(ctx, "until-drained", extra_sets=LAYOUTS[name])
    result = result_of(ctx, job, job.wait(s.run_timeout_s))
    run = LayoutRun(name, i, ok=result.ok, error=result.error)
    if result.ok:
        run.window_rate = result.rate
        run.scheduled_rate = s.records / float(result.details.get("scheduled_s") or float("nan"))
        run.write_s = float(result.details.get("write_s") or float("nan"))
        run.files_per_commit = files_per_commit(job.table)
    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.layouts", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    s = replace(BenchSettings(), records=args.records, partitions=(args.partitions,), members=0)
    stamp = time.strftime("%Y-%m-%d-%H%M%S")
    work = WORK_ROOT / f"layouts-{stamp}"
    facts = machine_facts()
    runs: list[LayoutRun] = []
    with EmbeddedKafka(work / "broker", heap="1g") as kafka:
        kafka.create_topic("layouts", partitions=args.partitions)
        produce_backlog(kafka.bootstrap, "layouts", args.records, s.producer_batch_bytes)
        for i in range(args.rounds):
            for name in LAYOUTS:
                runs.append(run_layout(kafka, s, "layouts", name, i, work))
                log.info("%s round %d: %s", name, i, asdict(runs[-1]))
    spark = open_spark()
    try:
        for run in runs:
            if run.ok:
                checked = check_table(spark, work / f"{run.layout}-{run.round}" / "table")
                run.rows, run.duplicates = checked.rows, checked.duplicates
                run.ok = run.rows == args.records and run.duplicates == 0
    finally:
        spark.stop()
    rows = []
    for name in LAYOUTS:
        mine = [r for r in runs if r.layout == name and r.ok]
        median = statistics.median([r.scheduled_rate for r in mine]) if mine else float("nan")
        base = [r for r in runs if r.layout == "plain" and r.ok]
        ratio = median / statistics.median([r.scheduled_rate for r in base]) if mine and base else float("nan")
        rows.append(
            [
                name,
                " ".join(LAYOUTS[name]) or "(none)",
                fmt_rate(median),
                f"{ratio:.2f}",
                ", ".join(f"{r.write_s:.1f}" for r in mine),
                "; ".join(str(r.files_per_commit) for r in mine),
                "ok" if len(mine) == args.rounds else "FAILED: " + "; ".join(r.error[:200] for r in runs if not r.ok),
            ]
        )
    head = ["layout", "keys", "scheduled records/s (median)", "/ plain", "write s per run", "files per commit"]
    head.append("tables")
    title = f"Table layouts: {args.records:,} JSON records on {args.partitions} partitions, {args.rounds} rounds"
    text = save_report(args.results_dir, f"{stamp}-layouts", title, (head, rows), facts, runs)
    print(text)
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
