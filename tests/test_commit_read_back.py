"""A commit's proof reads the commit back: a commit file another writer replaced stops the job.

On a store without mutual exclusion for Delta's commits (S3 with Delta's default log store), two
writers can both write `_delta_log/N.json` and the later replaces the earlier. The writer lease (S3)
and the commit lock (a local disk) keep a second Sharelake writer away; the proof's read-back is the
second line of defence: before anything is ACCEPTed on version N, the writer reads N.json and finds
its own commit there (its `userMetadata`, with the write's `write_id`), or stops.

Real broker, real Delta table: the job is held right after its first commit is durable; meanwhile
another writer's commit of the same version (a real Delta append to a copy of the table, its commit
file and data file) replaces the job's. What a user checks: the job stopped with one line naming the
store's missing mutual exclusion, the table holds the other writer's rows and none of the job's, and
the group still delivers every record (nothing of the batch was ACCEPTed).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devkit.sample_data import produce_json_events
from sharelake.failures import faults
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.ingest_config import ingest_config
from tests.kafka_helpers import share_receive
from tests.waiting import wait_for

pytestmark = pytest.mark.usefixtures("clean_faults")  # fault points reset before each test (conftest)

RECORDS = 200
OTHER_TOPIC = "another-writers-topic"


def commit_file(table: Path, version: int) -> Path:
    return table / "_delta_log" / f"{version:020d}.json"


def replace_with_another_writers_commit(spark: SparkSession, table: Path, version: int, scratch: Path) -> None:
    """What the later of two writers racing for `version` leaves: its own commit file (and Delta's
    checksum of it) in place of ours, its data file beside ours. The other writer is a real Delta
    append of the same rows under another topic, made to a copy of the table as it stood before
    `version` (none: `version` 0 creates it)."""
    ours = [
        json.loads(line)["add"]["path"]
        for line in commit_file(table, version).read_text().splitlines()
        if '"add"' in line
    ]
    rows = spark.read.parquet(*(str(table / p) for p in ours)).withColumn("topic", F.lit(OTHER_TOPIC))
    (scratch / "_delta_log").mkdir(parents=True)
    for earlier in range(version):  # the log the other writer read before it committed
        shutil.copy(commit_file(table, earlier), commit_file(scratch, earlier))
    metadata = json.dumps({"sharelake": {"v": 1, "write_id": "another-writer", "batch_id": 0, "ranges": {}}})
    rows.write.format("delta").mode("append").option("userMetadata", metadata).save(str(scratch))
    theirs = [
        json.loads(line)["add"]["path"]
        for line in commit_file(scratch, version).read_text().splitlines()
        if '"add"' in line
    ]
    for path in theirs:
        shutil.copy(scratch / path, table / path)
    wait_for(
        lambda: (table / "_delta_log" / f"{version:020d}.crc").exists(), 60,
        "Delta's checksum of the job's commit was not written in 60 s",
    )  # fmt: skip
    for name in (f"{version:020d}.json", f"{version:020d}.crc"):
        os.replace(scratch / "_delta_log" / name, table / "_delta_log" / name)
        (table / "_delta_log" / f".{name}.crc").unlink(missing_ok=True)  # Hadoop's sum of the file replaced


def test_a_commit_file_replaced_by_another_writer_before_the_proof_stops_the_job_and_accepts_nothing(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"replaced-{unique}"
    broker.create_topic(topic, partitions=1)
    produced = produce_json_events(broker.bootstrap, topic, RECORDS)
    table, group, go = tmp_path / "events", f"g-{unique}", tmp_path / "go"
    cfg = ingest_config(broker, topic, group, table, "kafka.record_lock_duration_ms=60000")
    monkeypatch.setenv(faults.ENV, f"wait@after_delta_commit={go}")  # held after its first commit is durable

    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            run_ingest(spark, cfg)
            outcome.append(None)
        except Exception as e:  # noqa: BLE001 - what the run ended with is the test's to check
            outcome.append(e)

    job = threading.Thread(target=run)
    job.start()
    try:
        wait_for(
            lambda: go.with_name("go.waiting").exists(), 180, "the job made no commit in 180 s",
            give_up=lambda: not job.is_alive(),
        )  # fmt: skip
        replace_with_another_writers_commit(spark, table, 0, tmp_path / "other")
    finally:
        go.touch()
        job.join(300)
    assert not job.is_alive() and outcome, "the run did not end"

    error = outcome[0]
    assert error is not None, "the job went on after its commit file was replaced: its records were ACCEPTed"
    line = str(error)
    assert "\n" not in line, line
    assert f"{table}: version 0 holds another writer's commit" in line, line
    assert "the store gives Delta's commits no mutual exclusion; nothing of the batch is ACCEPTed" in line, line

    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # type: ignore[union-attr]
    topics = {r.topic for r in spark.read.format("delta").load(str(table)).select("topic").distinct().collect()}
    assert topics == {OTHER_TOPIC}, topics  # the other writer's commit is version 0; none of the job's rows

    # nothing of the batch was ACCEPTed: a fresh member of the group gets every record again
    want = {(p.partition, p.offset) for p in produced}
    got = share_receive(broker, topic, group, seconds=60, expect=RECORDS)
    assert set(got) == want and len(got) == RECORDS, f"{len(want - set(got))} records were ACCEPTed"
