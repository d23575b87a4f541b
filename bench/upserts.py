"""Upserts against appends and against Spark's hand-written MERGE.

    python -m bench.upserts [--records N] [--partitions P] [--rounds R]

Run on its own (not a phase of `bench.run`). One broker, one topic holding the workload's JSON
backlog keyed by `user` (`bench.workload.user_key`: 9,973 users, so each user's records share a
partition, about N / 9,973 versions each); per round, in turn (interleaved round by round), each
contender drains the whole topic into a fresh table:

- `sharelake-append`: Sharelake's default, every record a row;
- `sharelake-upsert`: `write.mode = "upsert"`, `write.keys = ["user"]`;
- `spark-merge`: Spark's Kafka source with Trigger.AvailableNow in micro-batches of `MERGE_BATCH`
  records and the `foreachBatch` MERGE users write (`bench/spark_jobs/kafka_source_merge.py`: the
  newest record per user, then a MERGE replacing a row only with a newer one).

Each run gives records/s over the job's own window (its start line to its last commit: Sharelake's
`run ended:` start, Spark's `bench-started`) and over the whole process (launch to last commit),
and its commits. After the rounds each table is checked: the append table holds every record once;
each upserted table one row per user, each at its newest record (the highest id of the user).
Writes `bench/results/<stamp>-upserts.md` and `.json`.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pyspark.sql import SparkSession

from app.testing.kafka_broker import EmbeddedKafka
from bench.contenders.base import RunContext, run_logged, started_at, tail
from bench.contenders.sharelake import parse_job_log, start_sharelake
from bench.contenders.spark_kafka_source import submit_command
from bench.figures import fmt_rate, save_report
from bench.machine import machine_facts
from bench.settings import RESULTS_DIR, WORK_ROOT, BenchSettings
from bench.verify import check_table, open_spark
from bench.workload import produce_backlog, user_key
from devkit.delta_log import read_commits
from devkit.paths import PROJECT_ROOT

log = logging.getLogger("bench")

USERS = 9973  # bench.workload's users: record i belongs to user i % USERS
MERGE_JOB = PROJECT_ROOT / "bench" / "spark_jobs" / "kafka_source_merge.py"
UPSERT = ("write.mode=upsert", 'write.keys=["user"]')
# Spark's micro-batches: about Sharelake's on this backlog (40,000 records a commit on 4 partitions),
# so that its MERGEs run on a table that exists, as a stream's do (in one batch, there is no MERGE)
MERGE_BATCH = 40_000
CONTENDERS = ("sharelake-append", "sharelake-upsert", "spark-merge")


@dataclass
class UpsertRun:
    contender: str
    round: int
    ok: bool = False
    error: str = ""
    window_rate: float = float("nan")  # records / (the job's start line -> its last commit)
    scheduled_rate: float = float("nan")  # records / (process launch -> its last commit)
    commits: int = 0
    checked: str = ""


def run_one(ctx: RunContext, contender: str) -> UpsertRun:
    run = UpsertRun(contender, int(ctx.run_dir.name.rsplit("-", 1)[1]))
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    table = ctx.run_dir / "table"
    launched = time.time()
    if contender == "spark-merge":
        per_batch = ["--max-offsets-per-trigger", str(MERGE_BATCH)]
        cmd, env = submit_command(ctx, MERGE_JOB, table, "--key", "user", *per_batch)
        logfile = ctx.run_dir / "spark-merge.log"
        code = run_logged(cmd, logfile, ctx.settings.run_timeout_s, env=env)
        started = started_at(logfile)
    else:
        job = start_sharelake(ctx, "until-drained", extra_sets=UPSERT if contender == "sharelake-upsert" else ())
        code = job.wait(ctx.settings.run_timeout_s)
        logfile = job.log
        started = parse_job_log(logfile).started
    commits = read_commits(table)
    last = commits[-1].timestamp_ms / 1000 if commits else None
    if code != 0 or started is None or last is None:
        run.error = f"exit {code}, started {started}, last commit {last}: {tail(logfile, 6)}"
        return run
    run.ok = True
    run.window_rate = ctx.records / (last - started)
    run.scheduled_rate = ctx.records / (last - launched)
    run.commits = len(commits)
    return run


def check_upserted(spark: SparkSession, table: Path, records: int) -> str:
    """'' when `table` holds one row per user, each its newest record (the user's highest id)."""
    rows = spark.read.format("delta").load(str(table))
    got = {r.user: r.id for r in rows.select("user", "id").collect()}
    want = {f"user-{u:05d}": max(range(u, records, USERS)) for u in range(min(USERS, records))}
    if len(got) != rows.count():
        return f"{rows.count() - len(got)} users twice"
    wrong = [u for u, i in want.items() if got.get(u) != i]
    return f"{len(wrong)} users not at their newest record, e.g. {wrong[0]}" if wrong else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.upserts", description="Upserts against appends and Spark's MERGE")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    s = replace(BenchSettings(), records=args.records, partitions=(args.partitions,), members=0)
    stamp = time.strftime("%Y-%m-%d-%H%M%S")
    work = WORK_ROOT / f"upserts-{stamp}"
    facts = machine_facts()
    runs: list[UpsertRun] = []
    with EmbeddedKafka(work / "broker", heap="1g") as kafka:
        kafka.create_topic("upserts", partitions=args.partitions)
        produce_backlog(kafka.bootstrap, "upserts", args.records, s.producer_batch_bytes, key_of=user_key)
        for i in range(args.rounds):
            for name in CONTENDERS:
                ctx = RunContext(kafka.bootstrap, "upserts", args.partitions, args.records, 0, work / f"{name}-{i}", s)
                runs.append(run_one(ctx, name))
                log.info("%s round %d: %s", name, i, asdict(runs[-1]))
    spark = open_spark()
    try:
        for run in (r for r in runs if r.ok):
            table = work / f"{run.contender}-{run.round}" / "table"
            if run.contender == "sharelake-append":
                checked = check_table(spark, table)
                ok = checked.rows == args.records and checked.duplicates == 0
                run.checked = "" if ok else f"{checked.rows} rows, {checked.duplicates} duplicates"
            else:
                run.checked = check_upserted(spark, table, args.records)
            run.ok = not run.checked
    finally:
        spark.stop()
    base = [r.window_rate for r in runs if r.contender == "sharelake-append" and r.ok]
    rows = []
    for name in CONTENDERS:
        mine = [r for r in runs if r.contender == name and r.ok]
        window = statistics.median([r.window_rate for r in mine]) if mine else float("nan")
        scheduled = statistics.median([r.scheduled_rate for r in mine]) if mine else float("nan")
        rows.append(
            [
                name,
                fmt_rate(window),
                f"{window / statistics.median(base):.2f}" if mine and base else "-",
                fmt_rate(scheduled),
                ", ".join(str(r.commits) for r in mine),
                "ok"
                if len(mine) == args.rounds
                else "FAILED: "
                + "; ".join((r.error or r.checked)[:200] for r in runs if r.contender == name and not r.ok),
            ]
        )
    head = [
        "contender",
        "records/s (job window, median)",
        "/ sharelake-append",
        "records/s (process)",
        "commits",
        "tables",
    ]
    title = (
        f"Upserts: {args.records:,} JSON records keyed by {min(USERS, args.records):,} users on "
        f"{args.partitions} partitions, {args.rounds} rounds"
    )
    text = save_report(args.results_dir, f"{stamp}-upserts", title, (head, rows), facts, runs)
    print(text)
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
