"""Delta tables on S3 (s3a://, through Hadoop's S3A connector to a real S3 API server).

The job runs as users run it (spark-submit.sh), with the S3 endpoint in its `[spark_conf]` and the
credentials in its environment; its table, its dead-letter table and Spark's checkpoint all live in
the bucket. A kill -9 in the middle, then a restart: every record exactly once, read back by chispa.
Every part of Sharelake that reads the Delta log itself does it through S3 here: the dedup cache
(the restart recognises the crashed batch's commit), the background checkpoints with Delta Kernel
(every 2 commits), Spark's checkpoint of the trigger clock.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from app.embedded.kafka_broker import EmbeddedKafka
from app.embedded.s3_server import EmbeddedS3
from app.embedded.sample_data import produce_json_events
from tests.job_runner import JobSpec, drain_in_process, drain_job, run_summary
from tests.table_checks import assert_exactly_once


def test_kill_mid_ingest_into_an_s3_table_then_restart(
    broker: EmbeddedKafka, spark: SparkSession, s3: EmbeddedS3, tmp_path: Path, unique: str
) -> None:
    bucket = s3.bucket(f"lake-{unique}")
    table = f"{bucket}/events"
    clock = f"{bucket}/_checkpoints/clock"
    spec = JobSpec(
        broker, f"s3-{unique}", f"g-{unique}", table, checkpoint=clock, s3=s3, settings=("delta.checkpoint_interval=2",)
    )  # type: ignore[arg-type]
    broker.create_topic(spec.topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, spec.topic, 6000)

    # killed right after the second micro-batch's Delta commit, before its ACCEPTs
    rc = drain_job(spec, tmp_path / "run1.log", faults="kill@after_delta_commit#2")
    log1 = (tmp_path / "run1.log").read_text(errors="replace")
    assert rc != 0, log1[-2000:]
    rows_after_crash = spark.read.format("delta").load(table).count()
    assert 0 < rows_after_crash < 6000, log1[-2000:]

    # the restart: its dedup cache reads the commits from S3 and recognises the crashed batch
    assert drain_in_process(spark, spec, tmp_path / "run2.log") == 0, (tmp_path / "run2.log").read_text()[-3000:]
    second = run_summary(tmp_path / "run2.log")
    assert_exactly_once(spark, table, produced)  # type: ignore[arg-type]
    assert second["dedup_hits"] > 0
    logs = log1 + (tmp_path / "run2.log").read_text(errors="replace")
    assert "background, Delta Kernel)" in logs and "background checkpoint failed" not in logs
    jvm, hadoop = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    last = jvm.org.apache.hadoop.fs.Path(f"{table}/_delta_log/_last_checkpoint")  # type: ignore[union-attr]
    assert last.getFileSystem(hadoop).exists(last)
