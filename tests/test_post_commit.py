"""ACCEPT as soon as the commit is durable, never before it, and never waiting for post-commit work.

Delta runs post-commit work (its checksum file, a checkpoint when due) inside `save()`, after the
commit file is written; Sharelake's own checkpoints follow. Records must not stay locked through
that, and must not be ACCEPTed before the commit file holding them exists. Real broker, real Delta
table: every ACCEPT is timed by the consumer itself and compared with the commit file's mtime.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from confluent_kafka import AcknowledgeType, Message, ShareConsumer
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events
from sharelake.consume.share.share_group import ShareGroupType
from sharelake.failures import faults
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.ingest_config import ingest_config
from tests.job_runner import JobSpec, drain_in_process, drain_job, run_summary
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once

pytestmark = pytest.mark.usefixtures("clean_faults")  # fault points reset before each test (conftest)


class RecordingConsumer(ShareConsumer):  # type: ignore[misc]
    """A real ShareConsumer that notes when each record was ACCEPTed (wall clock, ns)."""

    accepted_at: ClassVar[dict[tuple[int, int], int]] = {}
    lock = threading.Lock()

    def acknowledge(self, message: Message, ack_type: Any = AcknowledgeType.ACCEPT) -> None:
        if ack_type == AcknowledgeType.ACCEPT:
            with self.lock:
                self.accepted_at[(int(message.partition() or 0), int(message.offset() or 0))] = time.time_ns()
        super().acknowledge(message, ack_type)


def commit_written_at(table: Path) -> dict[int, int]:
    """ingested_at (micros, one per append) -> mtime (ns) of the commit file that added those rows."""
    out = {}
    for f in (table / "_delta_log").glob("*.json"):
        for line in f.read_text().splitlines():
            if '"commitInfo"' in line:
                meta = json.loads(json.loads(line)["commitInfo"].get("userMetadata") or "{}")
                stamp = (meta.get("sharelake") or {}).get("ingested_at_us")
                if stamp is not None:
                    out[int(stamp)] = f.stat().st_mtime_ns
    return out


def test_accepts_follow_the_durable_commit_and_do_not_wait_for_post_commit_work(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = f"post-commit-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, topic, 6000)
    # the second commit's post-commit work (as a checkpoint would) takes twice the group's 3 s record lock
    monkeypatch.setenv(faults.ENV, "delay@delta_post_commit#2=6")
    RecordingConsumer.accepted_at = {}
    cfg = ingest_config(
        broker,
        topic,
        group,
        tmp_path / "t",
        "kafka.record_lock_duration_ms=3000",
        "pump.members=2",  # each batch takes both members' polls: no poll waits behind another batch
        "pump.max_poll_records=500",
        "batch.max_records=1000",  # several commits after the slow one
    )
    summary = run_ingest(spark, cfg, group=ShareGroupType(RecordingConsumer))
    assert_exactly_once(spark, tmp_path / "t", produced)

    # no lock expired although post-commit work outlasted every lock: the ACCEPTs did not wait for it
    assert summary.late_accepts == 0 and summary.ack_errors == 0 and summary.dedup_hits == 0, summary
    assert summary.delta_commits >= 3, summary  # commits after the slow one: the delay really was in the way
    # ... and each ACCEPT came after the commit file holding its record was written (INVARIANT 1)
    written = commit_written_at(tmp_path / "t")
    rows = (
        spark.read.format("delta")
        .load(str(tmp_path / "t"))
        .selectExpr("partition", "offset", "unix_micros(ingested_at) AS s")
    )
    early = [
        (r["partition"], r["offset"])
        for r in rows.collect()
        if RecordingConsumer.accepted_at[(r["partition"], r["offset"])] < written[r["s"]]
    ]
    assert len(RecordingConsumer.accepted_at) == len(produced) and early == []


def test_kill_between_the_commit_and_post_commit_work_then_restart(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(broker, f"post-kill-{unique}", f"g-{unique}", tmp_path / "table")
    broker.create_topic(spec.topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, spec.topic, 6000)

    # the second commit is durable, its records maybe ACCEPTed; the driver dies before post-commit work ends
    rc = drain_job(spec, tmp_path / "run1.log", faults="kill@delta_post_commit#2")
    assert rc != 0, (tmp_path / "run1.log").read_text()[-2000:]
    assert len(list((spec.table / "_delta_log").glob("*.json"))) >= 2  # both commits made it

    assert drain_in_process(spark, spec, tmp_path / "run2.log") == 0, (tmp_path / "run2.log").read_text()[-3000:]
    second = run_summary(tmp_path / "run2.log")
    assert_exactly_once(spark, spec.table, produced)
    assert second["concurrent_claims"] == 0 and second["ack_errors"] == 0
    assert nothing_left(broker, spec.topic, spec.group)


def test_sharelake_checkpoints_the_table_in_the_background_readers_use_it_and_expired_log_goes(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"checkpoints-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, topic, 4000)
    table = tmp_path / "t"
    settings = ("delta.checkpoint_interval=2", "batch.max_records=400", "pump.max_poll_records=200")
    cfg = ingest_config(broker, topic, group, table, *settings, "delta.log_retention=interval 10 minutes")
    summary = run_ingest(spark, cfg)
    assert summary.delta_commits >= 6, summary

    log_dir = table / "_delta_log"
    last = json.loads((log_dir / "_last_checkpoint").read_text())
    checkpoints = sorted(int(f.name.split(".")[0]) for f in log_dir.glob("*.checkpoint.parquet"))
    assert checkpoints and last["version"] == checkpoints[-1] >= 2, (checkpoints, last)
    # Delta's own in-commit checkpoint did not write them: the table's interval is 10 x Sharelake's
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
    assert detail is not None and detail["properties"]["delta.checkpointInterval"] == "20"
    # a reader that loads the table afresh starts from the newest checkpoint and sees every row once
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table))  # loads it
    assert delta_log.unsafeVolatileSnapshot().logSegment().checkpointProvider().version() == checkpoints[-1]
    assert_exactly_once(spark, table, produced)

    # an hour later (the log's files aged by hand), with a 10-minute retention: the next run's
    # checkpoints delete the expired commits, back to the newest expired checkpoint, and their checksums
    assert detail["properties"]["delta.logRetentionDuration"] == "interval 10 minutes"
    assert detail["properties"]["delta.deletedFileRetentionDuration"] == "interval 10 minutes"  # Delta needs <=
    versions = lambda suffix: sorted(int(f.name.split(".")[0]) for f in log_dir.glob(f"[0-9]*{suffix}"))  # noqa: E731
    last_aged = versions(".json")[-1]  # a run's last commit need not be checkpointed (the interval is 2)
    an_hour_ago = time.time() - 3600
    for f in log_dir.iterdir():
        os.utime(f, (an_hour_ago, an_hour_ago))
    produced += produce_json_events(broker.bootstrap, topic, 2000, start=4000)
    assert run_ingest(spark, cfg).delta_commits >= 3
    # the expired commits went, back to a checkpoint the log is read from, and nothing fresh went: the
    # log starts at the first run's last checkpoint, or at the second run's first when the first run's
    # last commits (after its last checkpoint) expired whole with it (the cleanup's exact boundary
    # depends on which checkpoint's cleanup met the expired files: both were seen in CI)
    kept = versions(".json")
    every_checkpoint = set(checkpoints) | {int(f.name.split(".")[0]) for f in log_dir.glob("*.checkpoint.parquet")}
    assert kept[0] in every_checkpoint, (kept, sorted(every_checkpoint))
    assert checkpoints[-1] <= kept[0] <= last_aged + 1, (kept, checkpoints[-1], last_aged)
    assert kept == list(range(kept[0], kept[-1] + 1)), kept  # no hole: every version from there is readable
    assert versions(".crc")[0] >= kept[0], versions(".crc")
    assert_exactly_once(spark, table, produced)  # the log is read from the kept checkpoint on
