"""Contender (b), Spark's built-in Kafka source (consumer groups, not share groups) into Delta.

`run_spark_kafka_source` submits `bench/spark_jobs/kafka_source_to_delta.py` (Trigger.AvailableNow)
for a throughput run; `start_continuous` submits `bench/spark_jobs/kafka_source_continuous.py`
(Trigger.ProcessingTime, until SIGTERM), the latency phase's anchor. Both go through
./spark-submit.sh (same master, Delta jars and confs
as Sharelake). spark-submit.sh takes no extra jars (its own `--jars` holds the Delta jars, and it
reads its first other argument as the job), so the Kafka source jars resolved into
.cache/jars/bench by `make bench-setup` reach the driver JVM's classpath through
SPARK_DIST_CLASSPATH, which Spark's launcher appends to it; in local mode that is the executors'
classpath too.

records/s = rows in the table / (time of the table's last commit - the job's `bench-started`
line), the same window as Sharelake's: after the SparkSession is up, until the last Delta commit.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.contenders.base import BENCH_JOB_ENV, RunContext, RunResult, delta_job_result, failed, run_logged
from bench.settings import BENCH_JARS
from devkit.delta_log import mean_commit_interval_s, read_commits
from devkit.ingest_job import stop_group
from devkit.paths import PROJECT_ROOT
from devkit.workload import SCHEMA_DDL
from sharelake.testing.kafka_broker import jars_in

NAME = "spark-kafka-source"
JOB = PROJECT_ROOT / "bench" / "spark_jobs" / "kafka_source_to_delta.py"
CONTINUOUS_JOB = PROJECT_ROOT / "bench" / "spark_jobs" / "kafka_source_continuous.py"
READY_LINE = "bench-started: "  # printed by both jobs once the SparkSession is up


def submit_command(ctx: RunContext, job: Path, table: Path, *extra: str) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command of `job` on ctx's topic and its environment; FileNotFoundError
    when `make bench-setup` has not resolved the Kafka source jars."""
    classpath = os.pathsep.join(str(j) for j in jars_in(BENCH_JARS))
    cmd = [
        str(PROJECT_ROOT / "spark-submit.sh"), str(job),
        "--bootstrap", ctx.bootstrap, "--topic", ctx.topic, "--table", str(table),
        "--checkpoint", str(ctx.run_dir / "checkpoint"), "--schema", SCHEMA_DDL, *extra,
    ]  # fmt: skip
    dist = os.pathsep.join(p for p in (os.environ.get("SPARK_DIST_CLASSPATH"), classpath) if p)
    # as users run Spark's source: without the class archive Sharelake builds for its own driver
    return cmd, {"SPARK_DIST_CLASSPATH": dist, "SHARELAKE_CLASS_ARCHIVES": "", **BENCH_JOB_ENV}


def run_spark_kafka_source(ctx: RunContext, name: str = NAME, *extra: str) -> RunResult:
    """One Trigger.AvailableNow drain (`name` and `extra` arguments of the job: the Avro contender)."""
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    table, log = ctx.run_dir / "table", ctx.run_dir / f"{name}.log"
    try:
        cmd, env = submit_command(ctx, JOB, table, *extra)
    except FileNotFoundError:
        return failed(ctx, name, f"no jars in {BENCH_JARS}: run `make bench-setup`")
    launched_at = time.time()
    code = run_logged(cmd, log, ctx.settings.run_timeout_s, env=env)
    return delta_job_result(ctx, name, code, log, table, launched_at=launched_at)


@dataclass
class ContinuousJob:
    """The latency phase's running Spark job (group leader: the spark-submit JVM), its log and table."""

    ctx: RunContext
    proc: subprocess.Popen[bytes]
    log: Path
    table: Path

    def stop(self, grace_s: float = 60.0) -> int:
        """SIGTERM the job's process group (SIGKILL after `grace_s`); its exit code, -9 if it stays."""
        stop_group(self.proc, grace_s)
        code = self.proc.poll()
        return -9 if code is None else code

    def kill(self) -> None:
        stop_group(self.proc, grace_s=10.0)

    def result(self, code: int) -> RunResult:
        """The RunResult once stopped: rows in the table / (last Delta commit - bench-started); its exit
        code after SIGTERM is a detail, not a failure."""
        details = {
            "mean_commit_interval_s": mean_commit_interval_s(read_commits(self.table)) or float("nan"),
            "exit_code_after_sigterm": float(code),
        }
        return delta_job_result(self.ctx, NAME, 0, self.log, self.table, details)


def start_continuous(ctx: RunContext) -> ContinuousJob:
    """Submit `kafka_source_continuous.py` on ctx's topic with the settings' processing-time trigger."""
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    table, log = ctx.run_dir / "table", ctx.run_dir / "spark-kafka-source.log"
    cmd, env = submit_command(ctx, CONTINUOUS_JOB, table, "--trigger", ctx.settings.latency_trigger)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **env},  # its own group: a stop reaches JVM and Python
        )  # fmt: skip
    return ContinuousJob(ctx, proc, log, table)
