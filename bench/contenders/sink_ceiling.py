"""Contender (e), the sink ceiling: the workload's rows, already in Arrow in the driver, appended to
a fresh Delta table through Sharelake's own write path and parse, with no Kafka at all.

`run_sink_ceiling` submits
`bench/spark_jobs/sink_ceiling.py` through ./spark-submit.sh (no extra jars) with the run's record
and partition counts and `ctx.batch_rows` rows per commit (the Sharelake run of the same round sets
it; 0 means DEFAULT_BATCH_ROWS). It is the limit of Spark plus Delta for this row shape on this
machine: the report divides Sharelake's rate by it.

records/s = rows in the table / (time of the table's last data commit - the job's `bench-started`
line). The window starts once the SparkSession is up AND every row is built in Arrow (neither the
JVM start nor the row build is in it), and ends at the last Delta commit.
"""

from __future__ import annotations

from pathlib import Path

from bench.contenders.base import BENCH_JOB_ENV, RunContext, RunResult, delta_job_result, run_logged
from devkit.paths import PROJECT_ROOT
from devkit.workload import SCHEMA_DDL

NAME = "sink-ceiling"
JOB = PROJECT_ROOT / "bench" / "spark_jobs" / "sink_ceiling.py"
DEFAULT_BATCH_ROWS = 20_000


def sink_ceiling_command(ctx: RunContext, table: Path, batch_rows: int) -> list[str]:
    return [
        str(PROJECT_ROOT / "spark-submit.sh"), str(JOB),
        "--records", str(ctx.records), "--partitions", str(ctx.partitions),
        "--batch-rows", str(batch_rows), "--table", str(table), "--schema", SCHEMA_DDL,
    ]  # fmt: skip


def run_sink_ceiling(ctx: RunContext) -> RunResult:
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    table, log = ctx.run_dir / "table", ctx.run_dir / "sink-ceiling.log"
    batch_rows = ctx.batch_rows if ctx.batch_rows > 0 else DEFAULT_BATCH_ROWS
    code = run_logged(sink_ceiling_command(ctx, table, batch_rows), log, ctx.settings.run_timeout_s, BENCH_JOB_ENV)
    return delta_job_result(ctx, NAME, code, log, table, {"batch_rows": float(batch_rows)})
