"""Runs the real ingest job as users do (`./spark-submit.sh jobs/ingest.py`) in a subprocess.

Crash tests need a separate driver process to kill; the job's log lines tell what it did. The run
after a crash that only has to finish the work (`drain_in_process`) runs the same pipeline in the
test's own SparkSession instead: a fresh start of it (members, dedup caches loaded from the table,
Spark's checkpoint), without a driver JVM to start and a cold JVM to warm up.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from devkit.network import Host
from devkit.s3_server import EmbeddedS3
from sharelake.config.loader import load_config
from sharelake.failures import faults as fault_points
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import KafkaBrokers

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class JobSpec:
    broker: KafkaBrokers
    topic: str
    group: str
    table: Path | str  # a local path, or an s3a:// URL on `s3`
    lock_ms: int = 3000
    checkpoint: Path | None = None  # keep Spark's batch ids across restarts (the re-run window)
    # routed: topic -> its table (`topic` is then unused, `table` is the shared dead-letter table)
    routes: dict[str, Path] | None = None
    s3: EmbeddedS3 | None = None  # the S3 API server of s3a:// tables: its endpoint in spark_conf
    settings: tuple[str, ...] = ()  # more `--set` overrides, for every run of the job
    table_name: str | None = None  # the table by catalog name instead of `table` (its path)

    def env(self) -> dict[str, str]:
        """The job's environment: the S3 credentials, where S3A's default chain reads them."""
        return {**os.environ, **(self.s3.credentials_env() if self.s3 else {})}

    def args(self, *extra: str, job: str = "ingest.py") -> list[str]:
        out = [
            str(ROOT / "spark-submit.sh"),
            str(ROOT / "jobs" / job),
            "--config",
            str(ROOT / "conf" / "local.toml"),
        ]
        for s in self.sets(*extra):
            out += ["--set", s]
        return out

    def sets(self, *extra: str) -> list[str]:
        """The job's `--set` overrides (over conf/local.toml)."""
        if self.routes is None:
            table = (
                f"delta.table_path={self.table}" if self.table_name is None else f"delta.table_name={self.table_name}"
            )
            where = [f"kafka.topic={self.topic}", table]
        else:
            names = ", ".join(f'"{t}"' for t in self.routes)
            where = [f"kafka.topics=[{names}]", f"dead_letter.table_path={self.table}"]
            where += [f"topics.{t}.table_path={path}" for t, path in self.routes.items()]
        sets = [
            f"kafka.bootstrap_servers={self.broker.bootstrap}",
            *where,
            f"kafka.group_id={self.group}",
            f"kafka.record_lock_duration_ms={self.lock_ms}",
            "pump.max_poll_records=500",
            "batch.max_records=2000",
            *([f"delta.checkpoint_path={self.checkpoint}"] if self.checkpoint else []),
            *(f'spark_conf.{k}="{v}"' for k, v in (self.s3.spark_conf() if self.s3 else {}).items()),
            *self.settings,
            *extra,
        ]
        return sets


def start_job(
    spec: JobSpec, *extra: str, faults: str = "", log: Path, host: Host | None = None
) -> subprocess.Popen[bytes]:
    """Start the job in its own process group (so a kill takes the JVM and the Python driver); on
    `host` (a host of a `devkit.network`) when given, else on the machine's loopback."""
    env = {**spec.env(), "SHARELAKE_FAULTS": faults}
    args = host.command(spec.args(*extra)) if host else spec.args(*extra)
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def run_job(spec: JobSpec, *extra: str, faults: str = "", log: Path, timeout: float = 300) -> int:
    proc = start_job(spec, *extra, faults=faults, log=log)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_job(proc)
        raise


def drain_job(spec: JobSpec, log: Path, idle_ms: int = 6000, faults: str = "") -> int:
    """Run until drained; idle long enough for expired locks and dead members to come back."""
    return run_job(spec, "run.mode=until-drained", f"run.idle_timeout_ms={idle_ms}", faults=faults, log=log)


def drain_in_process(spark: SparkSession, spec: JobSpec, log: Path, idle_ms: int = 6000) -> int:
    """`drain_job` without faults, in the test's SparkSession: 0 once drained, 1 if the run raised.

    The pipeline's log lines, and the `run ended:` line the entry point writes, go to `log`, so
    `run_summary` reads it as a job's log."""
    cfg = load_config(
        ROOT / "conf" / "local.toml", spec.sets("run.mode=until-drained", f"run.idle_timeout_ms={idle_ms}")
    )
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    fault_points.reset()
    try:
        summary = run_ingest(spark, cfg)
        logging.getLogger("jobs.ingest").info("run ended: %s", summary.line())
        return 0
    except Exception:
        logging.getLogger("jobs.ingest").exception("run failed")
        return 1
    finally:
        root.removeHandler(handler)
        handler.close()


def kill_job(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the whole driver (spark-submit JVM and Python driver)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def run_summary(log: Path) -> dict[str, float]:
    """The `run ended: k=v ...` line of a job's log."""
    text = log.read_text(errors="replace")
    m = re.findall(r"run ended: (.*)", text)
    assert m, f"no 'run ended' line in {log}:\n{text[-3000:]}"
    return {k: float(v) for k, v in (kv.split("=") for kv in m[-1].split())}


def start_failure(log: Path) -> list[str]:
    """The `sharelake:` lines the job printed (config and start-up failures are one such line)."""
    return [line for line in log.read_text(errors="replace").splitlines() if line.startswith("sharelake:")]
