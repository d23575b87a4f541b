"""kill -9 of the driver at each dangerous point, then a restart: nothing lost, nothing doubled.

The job runs as users run it (spark-submit.sh) in its own process; an injected fault point
SIGKILLs the Python driver at the exact moment under test (app/sharelake/failures/faults.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devkit.delta_log import added_files
from devkit.sample_data import produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import JobSpec, drain_in_process, drain_job, kill_job, run_summary, start_job
from tests.maintenance_loop import Maintenance
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for


@pytest.mark.parametrize(
    "point",
    [
        # committed to Delta, not yet ACCEPTed (the restart must recognise the redelivered records):
        # tests/test_s3_tables.py kills there, on an S3 table
        # the append's data files written, its commit not made: nothing references them, the records
        # come back and are written once
        "delta_files_written",
        # another writer's commit made Delta refuse ours; the same files not yet committed again
        "before_delta_recommit",
        # ACCEPTed, but Spark has not recorded the batch: it re-runs that batch id with new records
        "after_accept",
    ],
)
def test_kill_at_a_fault_point_then_restart(
    point: str, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    # a kept checkpoint: after the crash Spark re-runs the batch id it had not committed
    spec = JobSpec(broker, f"crash-{point}-{unique}", f"g-{unique}", tmp_path / "table", checkpoint=tmp_path / "clock")
    broker.create_topic(spec.topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, spec.topic, 6000)

    # the second micro-batch that writes dies at the point (the first one created the table, with a
    # plain append: its files-written point is the second batch's)
    faults = {"delta_files_written": "kill@delta_files_written#1", "after_accept": "kill@after_accept#2"}.get(point)
    foreign = None
    if point == "before_delta_recommit":
        # a forced order: the job's second append is held with its files written until another
        # writer has committed to the table, so Delta must refuse it, and the kill strikes before the
        # same files are committed again
        go = tmp_path / "foreign-committed"
        foreign = Maintenance(spark, spec.table, optimize=False)
        rules = f"wait@delta_files_written#1={go},kill@before_delta_recommit#1"
        until_drained = ("run.mode=until-drained", "run.idle_timeout_ms=6000")
        job = start_job(spec, *until_drained, faults=rules, log=tmp_path / "run1.log")
        try:
            wait_for(
                go.with_name(go.name + ".waiting").exists,
                180,
                "scenario not provoked: the job's second append never reached its files-written point",
                give_up=lambda: job.poll() is not None,
            )
            foreign.append_foreign()
            go.touch()
            rc = job.wait(180)
        finally:
            kill_job(job)
    else:
        rc = drain_job(spec, tmp_path / "run1.log", faults=faults or "")
    log1 = (tmp_path / "run1.log").read_text(errors="replace")
    assert rc != 0, log1[-2000:]
    mine = F.col("topic") == spec.topic
    rows_after_crash = spark.read.format("delta").load(str(spec.table)).where(mine).count()
    assert 0 < rows_after_crash < 6000
    if foreign is not None:
        assert "another writer committed first" in log1 and foreign.foreign_rows > 0, log1[-2000:]
    if point in ("delta_files_written", "before_delta_recommit"):  # written files nothing references
        referenced = {Path(p).name for p in added_files(spec.table)}
        on_disk = {f.name for f in spec.table.glob("*.parquet")}
        assert on_disk - referenced, "the kill left no written, uncommitted file"
    if point == "after_accept":
        # the kill hit the re-run window: Spark planned the batch (offsets/N) but never committed it
        clock = tmp_path / "clock"
        planned = max(int(f.name) for f in (clock / "offsets").iterdir() if f.name.isdigit())
        committed = max((int(f.name) for f in (clock / "commits").iterdir() if f.name.isdigit()), default=-1)
        assert planned > committed

    assert drain_in_process(spark, spec, tmp_path / "run2.log") == 0, (tmp_path / "run2.log").read_text()[-3000:]
    second = run_summary(tmp_path / "run2.log")
    assert_exactly_once(spark, spec.table, produced, where=f"topic = '{spec.topic}'")  # the foreign rows aside
    assert second["concurrent_claims"] == 0
