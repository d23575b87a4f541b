"""Upserts against appends and against Spark's hand-written MERGE.

    python -m bench upserts [--records N] [--partitions P] [--rounds R] [--keyed-by user|id] [--before-root DIR]

Run on its own (not a phase of `bench.run`). One broker, one topic holding the workload's JSON
backlog keyed by `user` (`devkit.workload.user_key`: 9,973 users, so each user's records share a
partition, about N / 9,973 versions each); per round, in turn (interleaved round by round), each
contender drains the whole topic into a fresh table:

- `sharelake-append`: Sharelake's default, every record a row;
- `sharelake-upsert`: `write.mode = "upsert"`, `write.keys = ["user"]`;
- `sharelake-upsert-before`, with `--before-root`: the same from another checkout (the commit before
  a change);
- `spark-merge`: Spark's Kafka source with Trigger.AvailableNow in micro-batches of `MERGE_BATCH`
  records and the `foreachBatch` MERGE users write (`bench/spark_jobs/kafka_source_merge.py`: the
  newest record per user, then a MERGE replacing a row only with a newer one).

`--keyed-by id` upserts by the record's `id` instead: every record a key of its own, so each batch
brings only keys the table lacks (an insert-only stream, as an outbox or an event table keyed by
event id); each upserted table must then hold every record once.

Each run gives records/s over the job's own window (its start line to its last commit: Sharelake's
`run ended:` start, Spark's `bench-started`) and over the whole process (launch to last commit),
and its commits. After the rounds each table is checked: the append table holds every record once;
each upserted table one row per user, each at its newest record (the highest id of the user).
Writes `bench/results/<stamp>-upserts.md` and `.json`.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from bench.contenders.base import RunContext, run_logged, started_at, tail
from bench.contenders.sharelake import start_sharelake
from bench.contenders.spark_kafka_source import submit_command
from bench.figures import finite_median, fmt_rate, runs_data, save_report, table_report
from bench.harness import backlog, stamp, work_folder
from bench.machine import machine_facts
from bench.settings import add_before_root, add_drain_arguments, drain_settings
from bench.verify import check_table
from devkit.delta_log import read_commits
from devkit.job_logs import parse_job_log
from devkit.paths import PROJECT_ROOT
from devkit.spark_check import spark_session
from devkit.workload import user_key

HELP = "upserts against appends and against Spark's hand-written foreachBatch MERGE, one backlog keyed by user"
log = logging.getLogger(__name__)

USERS = 9973  # devkit.workload's users: record i belongs to user i % USERS
MERGE_JOB = PROJECT_ROOT / "bench" / "spark_jobs" / "kafka_source_merge.py"
# Spark's micro-batches: about Sharelake's on this backlog (40,000 records a commit on 4 partitions),
# so that its MERGEs run on a table that exists, as a stream's do (in one batch, there is no MERGE)
MERGE_BATCH = 40_000
CONTENDERS = ("sharelake-append", "sharelake-upsert", "spark-merge")
BEFORE = "sharelake-upsert-before"
KEYS = ("user", "id")  # what the upserts are keyed by: 9,973 users, or every record its own id


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


def run_one(ctx: RunContext, contender: str, key: str, before_root: Path | None) -> UpsertRun:
    run = UpsertRun(contender, int(ctx.run_dir.name.rsplit("-", 1)[1]))
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    table = ctx.run_dir / "table"
    launched = time.time()
    if contender == "spark-merge":
        per_batch = ["--max-offsets-per-trigger", str(MERGE_BATCH)]
        cmd, env = submit_command(ctx, MERGE_JOB, table, "--key", key, *per_batch)
        logfile = ctx.run_dir / "spark-merge.log"
        code = run_logged(cmd, logfile, ctx.settings.run_timeout_s, env=env)
        started = started_at(logfile)
    else:
        upsert = ("write.mode=upsert", f'write.keys=["{key}"]') if contender != "sharelake-append" else ()
        root = before_root if contender == BEFORE and before_root is not None else PROJECT_ROOT
        job = start_sharelake(ctx, "until-drained", extra_sets=upsert, root=root)
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


def configure(p: argparse.ArgumentParser) -> None:
    add_drain_arguments(p)
    p.add_argument("--keyed-by", choices=KEYS, default="user", help="the upserts' key column (default user)")
    add_before_root(p)


settings = drain_settings


def run(args: argparse.Namespace) -> int:
    s = settings(args)
    records, partitions = s.records, s.partitions[0]
    at = stamp()
    facts = machine_facts()
    runs: list[UpsertRun] = []
    key, before_root = args.keyed_by, args.before_root
    contenders = CONTENDERS if before_root is None else (*CONTENDERS[:2], BEFORE, *CONTENDERS[2:])
    with work_folder(s.work_dir, f"{at.file}-upserts", s.keep_work) as work:
        with backlog(work, "upserts", partitions, records, key_of=user_key) as kafka:
            for i in range(s.runs):
                for name in contenders:
                    ctx = RunContext(kafka.bootstrap, "upserts", partitions, records, 0, work / f"{name}-{i}", s)
                    runs.append(run_one(ctx, name, key, before_root))
                    log.info("%s round %d: %s", name, i, asdict(runs[-1]))
        with spark_session() as spark:
            for upserted in (r for r in runs if r.ok):
                table = work / f"{upserted.contender}-{upserted.round}" / "table"
                if upserted.contender == "sharelake-append" or key == "id":
                    checked = check_table(spark, table)
                    ok = checked.rows == records and checked.duplicates == 0
                    upserted.checked = "" if ok else f"{checked.rows} rows, {checked.duplicates} duplicates"
                else:
                    upserted.checked = check_upserted(spark, table, records)
                upserted.ok = not upserted.checked
    base = [r.window_rate for r in runs if r.contender == "sharelake-append" and r.ok]
    rows = []
    for name in contenders:
        mine = [r for r in runs if r.contender == name and r.ok]
        window = finite_median([r.window_rate for r in mine])
        rows.append(
            [
                name,
                fmt_rate(window),
                f"{window / finite_median(base):.2f}" if mine and base else "-",
                fmt_rate(finite_median([r.scheduled_rate for r in mine])),
                ", ".join(str(r.commits) for r in mine),
                "ok"
                if len(mine) == s.runs
                else "FAILED: "
                + "; ".join((r.error or r.checked)[:200] for r in runs if r.contender == name and not r.ok),
            ]
        )
    head = ["contender", "records/s (job window, median)", "/ sharelake-append", "records/s (process)", "commits"]
    head.append("tables")
    title = (
        f"Upserts: {records:,} JSON records keyed by "
        f"{f'{min(USERS, records):,} users' if key == 'user' else 'id (every record a new key)'} on "
        f"{partitions} partitions, {s.runs} rounds"
    )
    save_report(s.results_dir, f"{at.file}-upserts", table_report(title, (head, rows), facts), runs_data(runs))
    return 0 if all(r.ok for r in runs) else 1
