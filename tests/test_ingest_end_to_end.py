"""Walking skeleton, end to end: real broker -> share-group members -> foreachBatch -> Delta -> ACCEPT."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.ingest_config import ingest_config
from tests.kafka_helpers import nothing_left, share_receive
from tests.table_checks import assert_exactly_once


def test_ingest_lands_every_record_once_and_accepts_them(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"e2e-{unique}", f"sharelake-{unique}"
    broker.create_topic(topic, partitions=3)
    produced = produce_json_events(broker.bootstrap, topic, 10_000)
    assert len({p.key for p in produced}) == 10_000

    summary = run_ingest(spark, ingest_config(broker, topic, group, tmp_path / "table", idle_ms=2500))

    assert_exactly_once(spark, tmp_path / "table", produced)
    assert summary.accepted == 10_000 and summary.released == 0 and summary.rejected == 0
    assert summary.ack_errors == 0 and summary.poll_errors == 0  # the broker took every acknowledgement
    assert summary.rows_written == 10_000
    # each Delta commit's steps are timed: the claim's snapshot, the Spark job writing the files, Delta's commit,
    # the commit file read back (the fixed cost of a commit, broken down in the bench report)
    steps = summary.commit_step_s
    checked = {"start", "files", "log"} if summary.delta_commits > 1 else set()
    assert set(steps) == {"create", "read_back", *checked}, (steps, summary.delta_commits)
    assert all(seconds > 0 for seconds in steps.values()), steps
    assert "commit_read_back_s=" in summary.line() and "commit_create_s=" in summary.line()
    # every Delta commit carries the offset ranges it holds
    meta = [r.userMetadata for r in spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'table'}`").collect()]
    assert meta and all('"ranges"' in (m or "") for m in meta)
    # Sharelake checkpoints the table itself, off the commit path; Delta's in-commit checkpoint of the
    # table it created is a backstop at 10 x delta.checkpoint_interval; the raw value is kept out of the stats
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{tmp_path / 'table'}`").first()
    assert detail is not None and detail["properties"].get("delta.checkpointInterval") == "1000", detail
    stats = detail["properties"].get("delta.dataSkippingStatsColumns", "").split(",")
    assert "offset" in stats and "value" not in stats and "headers" not in stats, detail

    # nothing was deleted: a new group from the earliest offset sees all 10,000 ...
    again = share_receive(broker, topic, f"{group}-other", seconds=60, expect=10_000, earliest=True)
    assert sorted(again) == sorted((p.partition, p.offset) for p in produced)
    # ... and all were ACCEPTed: the same group delivers nothing more (a sentinel produced now is all it gets)
    assert nothing_left(broker, topic, group)


def test_asynchronous_acknowledgement_commits_land_every_record_once_and_accept_them(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """pump.acknowledgement_commit = "async": the members poll again without waiting for the broker's
    answer; every answer still arrives (the callback logs any refusal) and nothing is left behind."""
    topic, group = f"async-{unique}", f"sharelake-{unique}"
    broker.create_topic(topic, partitions=3)
    produced = produce_json_events(broker.bootstrap, topic, 10_000)
    cfg = ingest_config(broker, topic, group, tmp_path / "table", "pump.acknowledgement_commit=async", idle_ms=2500)
    summary = run_ingest(spark, cfg)

    assert_exactly_once(spark, tmp_path / "table", produced)
    assert summary.accepted == 10_000 and summary.released == 0 and summary.ack_errors == 0
    assert "acknowledgements on" not in caplog.text
    assert nothing_left(broker, topic, group)
