"""kill -9 of the driver at each dangerous point, then a restart: nothing lost, nothing doubled.

The job runs as users run it (spark-submit.sh) in its own process; an injected fault point
SIGKILLs the Python driver at the exact moment under test (app/faults.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.embedded.kafka_broker import EmbeddedKafka
from app.embedded.sample_data import produce_json_events
from bench.delta_log import added_files
from tests.job_runner import JobSpec, drain_in_process, drain_job, run_summary
from tests.table_checks import assert_exactly_once


@pytest.mark.parametrize(
    "point",
    [
        # committed to Delta, not yet ACCEPTed (the restart must recognise the redelivered records):
        # tests/test_s3_tables.py kills there, on an S3 table
        # the append's data files written, its commit not made: nothing references them, the records
        # come back and are written once (the same state as a death between a conflict and the
        # commit of the same files again, tested in-process in tests/test_concurrent_writers.py)
        "delta_files_written",
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
    hit = 1 if point == "delta_files_written" else 2
    rc = drain_job(spec, tmp_path / "run1.log", faults=f"kill@{point}#{hit}")
    assert rc != 0, (tmp_path / "run1.log").read_text()[-2000:]
    rows_after_crash = spark.read.format("delta").load(str(spec.table)).count()
    assert 0 < rows_after_crash < 6000
    if point == "delta_files_written":  # written files nothing references: VACUUM's to remove
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
    assert_exactly_once(spark, spec.table, produced)
    assert second["concurrent_claims"] == 0
