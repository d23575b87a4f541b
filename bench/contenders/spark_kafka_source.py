"""Contender (b), Spark's built-in Kafka source (consumer groups, not share groups) into Delta.

Called by `bench.run`. Submits `bench/spark_jobs/kafka_source_to_delta.py` through
./spark-submit.sh (same master, Delta jars and confs as Sharelake). spark-submit.sh takes no extra
jars (its own `--jars` holds the Delta jars, and it reads its first other argument as the job), so
the Kafka source jars resolved into .cache/jars/bench by `make bench-setup` reach the driver JVM's
classpath through SPARK_DIST_CLASSPATH, which Spark's launcher appends to it; in local mode that
is the executors' classpath too.

records/s = rows in the table / (time of the table's last commit - the job's `bench-started`
line), the same window as Sharelake's: after the SparkSession is up, until the last Delta commit.
"""

from __future__ import annotations

import os
import re

from app.paths import PROJECT_ROOT, jars_in
from bench.contenders.base import RunContext, RunResult, failed, run_logged, tail
from bench.delta_log import data_commits, read_commits, rows_in
from bench.settings import BENCH_JARS
from bench.workload import SCHEMA_DDL

NAME = "spark-kafka-source"
JOB = PROJECT_ROOT / "bench" / "spark_jobs" / "kafka_source_to_delta.py"


def run_spark_kafka_source(ctx: RunContext) -> RunResult:
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    table, log = ctx.run_dir / "table", ctx.run_dir / "spark-kafka-source.log"
    try:
        classpath = os.pathsep.join(str(j) for j in jars_in(BENCH_JARS))
    except FileNotFoundError:
        return failed(ctx, NAME, f"no jars in {BENCH_JARS}: run `make bench-setup`")
    cmd = [
        str(PROJECT_ROOT / "spark-submit.sh"), str(JOB),
        "--bootstrap", ctx.bootstrap, "--topic", ctx.topic, "--table", str(table),
        "--checkpoint", str(ctx.run_dir / "checkpoint"), "--schema", SCHEMA_DDL,
    ]  # fmt: skip
    dist = os.pathsep.join(p for p in (os.environ.get("SPARK_DIST_CLASSPATH"), classpath) if p)
    code = run_logged(cmd, log, ctx.settings.run_timeout_s, env={"SPARK_DIST_CLASSPATH": dist})
    if code != 0:
        return failed(ctx, NAME, f"{'timed out' if code == -9 else f'exit code {code}'}: {tail(log, 8)}", log)
    m = re.search(r"^bench-started: ([\d.]+)$", log.read_text(errors="replace"), re.MULTILINE)
    commits = read_commits(table)
    data = data_commits(commits)
    if m is None or not data:
        return failed(ctx, NAME, f"no bench-started line or no commit: {tail(log, 8)}", log)
    window = data[-1].timestamp_ms / 1000 - float(m.group(1))
    details = {"data_commits": float(len(data))}
    return RunResult(
        NAME, ctx.phase, ctx.partitions, ctx.members, True, rows_in(commits), window, "", table, log, details
    )
