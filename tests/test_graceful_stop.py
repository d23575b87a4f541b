"""SIGTERM drains gracefully within the bound, whether it reaches the driver JVM or the whole group."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import JobSpec, drain_in_process, kill_job, run_summary, start_job
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

STOP_BOUND_S = 30


# CI runs the scheduler's case (SIGTERM to the process it started); a terminal's kill of the group is `make chaos`'s
@pytest.mark.parametrize("target", ["driver-jvm", pytest.param("process-group", marks=pytest.mark.long)])
def test_sigterm_drains_then_exits_and_loses_nothing(
    target: str, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(broker, f"term-{target}-{unique}", f"g-{unique}", tmp_path / "table", lock_ms=20000)
    broker.create_topic(spec.topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, spec.topic, 30_000)
    job = start_job(spec, "run.mode=continuous", f"run.stop_timeout_s={STOP_BOUND_S}", log=tmp_path / "run1.log")

    def commits() -> int:
        return len(list(spec.table.glob("_delta_log/*.json")))

    try:
        # mid-stream: the job has committed a batch and is writing the next
        wait_for(
            lambda: commits() >= 2, 120, interval_s=0.2, give_up=lambda: job.poll() is not None,
            failure=lambda: f"the job made {commits()} commits in 120 s, not 2 (exit {job.poll()}):\n"
            + (tmp_path / "run1.log").read_text(errors="replace")[-3000:],
        )  # fmt: skip

        # what YARN/Kubernetes do (SIGTERM to the container's main process) or a terminal's kill of the group
        sent = time.monotonic()
        if target == "driver-jvm":
            os.kill(job.pid, signal.SIGTERM)
        else:
            os.killpg(job.pid, signal.SIGTERM)
        rc = job.wait(STOP_BOUND_S + 30)
        took = time.monotonic() - sent
    finally:
        if job.poll() is None:
            kill_job(job)
    log = (tmp_path / "run1.log").read_text()

    # the JVM reports the signal (128 + 15) after the same graceful drain: the code docs/operations.md names
    assert rc == 143, log[-3000:]
    # a graceful stop reads as one: no stack trace from Spark's shutdown or its listeners calling a gone driver
    # (a signal to the whole group may also strike a helper process the JVM spawns at that instant: the
    # trigger clock's checkpoint `chmod`; its query then ends with that error, the drain is the same)
    assert not re.search(r"Py4J\w*Exception|Traceback|ShutdownHook .* failed", log), log[-4000:]
    assert took < STOP_BOUND_S + 15
    assert "draining" in log
    first = run_summary(tmp_path / "run1.log")  # the run ended through the graceful path
    assert first["accepted"] + first["released"] == first["polled"]  # every polled record decided

    def orphans() -> list[str]:
        return subprocess.run(["pgrep", "-f", str(spec.table)], capture_output=True, text=True).stdout.split()

    # the Python driver outlives the JVM's shutdown (its hooks call into it), then goes as the JVM does
    wait_for(
        lambda: not orphans(), 10, interval_s=0.2, failure=lambda: f"a driver process outlived the job: {orphans()}"
    )

    assert drain_in_process(spark, spec, tmp_path / "run2.log") == 0
    assert_exactly_once(spark, spec.table, produced)
