"""kafka.group_type = "consumer": a classic consumer group, offsets committed after the Delta commit.

Real broker, real Delta tables. What a user checks: every record once in the table, poison records
in the dead-letter table while their partition moves on; what the group still delivers (a sentinel
produced at the end is all a fresh member of the group gets); a kill -9 between the Delta commit
and the offset commit restarts where the table is; a second job joining and leaving mid-run
loses and doubles nothing; a table fed by a consumer group and then by a share group holds each
record once, with no gap.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events, produce_records
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka, KafkaBrokers
from tests.ingest_config import ingest_config
from tests.job_runner import JobSpec, drain_in_process, drain_job, run_summary, start_job
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

# a killed job's members leave the group after 6 s (the broker's minimum) instead of 45 s: until then
# a restart's members wait in the rebalance for them
CONSUMER = "kafka.group_type=consumer"
FAST_SESSION = "kafka.client.session.timeout.ms=6000"


def consumer_group_has_nothing_left(broker: KafkaBrokers, topic: str, group: str, seconds: float = 60) -> bool:
    """A sentinel produced now is the only record a fresh member of the consumer group receives."""
    (sentinel,) = produce_records(broker.bootstrap, topic, [(b"sentinel", b"sentinel")])
    consumer = Consumer({**broker.client_settings, "group.id": group, "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((int(msg.partition() or 0), int(msg.offset() or 0)))
                if got[-1] == (sentinel.partition, sentinel.offset):
                    deadline = min(deadline, time.monotonic() + 2)
    finally:
        consumer.close()
    return got == [(sentinel.partition, sentinel.offset)]


def test_a_consumer_group_lands_every_record_once_and_moves_past_poison(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = f"cg-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=3)
    good = produce_json_events(broker.bootstrap, topic, 3000)
    (bad,) = produce_records(broker.bootstrap, topic, [(b"bad", b'{"id": 1, "user": ')])
    good += produce_json_events(broker.bootstrap, topic, 3000, start=3000)
    settings = (CONSUMER, "payload.format=json", "payload.schema=id long, user string", "pump.members=8")
    summary = run_ingest(spark, ingest_config(broker, topic, group, tmp_path / "t", *settings))
    assert "members 3 (pump.members capped at the 3 partitions" in caplog.text  # the banner says so

    rows = spark.read.format("delta").load(str(tmp_path / "t")).select("partition", "offset")
    assert sorted((r[0], r[1]) for r in rows.collect()) == sorted((p.partition, p.offset) for p in good)
    parked = spark.read.format("delta").load(str(tmp_path / "t_dead_letter")).collect()
    assert [(r["partition"], r["offset"], r["error_class"]) for r in parked] == [
        (bad.partition, bad.offset, "malformed_json")
    ]
    assert summary.accepted == 6000 and summary.rejected == 1 and summary.released == 0
    assert consumer_group_has_nothing_left(broker, topic, group)  # every offset committed past its record


def test_kill_between_the_delta_commit_and_the_offset_commit_restarts_where_the_table_is(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(broker, f"cg-kill-{unique}", f"g-{unique}", tmp_path / "table", settings=(CONSUMER, FAST_SESSION))
    # one partition: both commits hold it, so its committed offset is the first commit's, behind the
    # table (with three, a slow machine's two batches could hold disjoint partitions, none behind)
    broker.create_topic(spec.topic, partitions=1)
    produced = produce_json_events(broker.bootstrap, spec.topic, 6000)
    # the second Delta commit is durable; the job dies before Kafka hears of its offsets
    rc = drain_job(spec, tmp_path / "run1.log", faults="kill@after_delta_commit#2")
    assert rc != 0, (tmp_path / "run1.log").read_text(errors="replace")[-2000:]
    assert 0 < spark.read.format("delta").load(str(spec.table)).count() < 6000

    assert drain_in_process(spark, spec, tmp_path / "run2.log") == 0, (tmp_path / "run2.log").read_text()[-3000:]
    log2 = (tmp_path / "run2.log").read_text(errors="replace")
    assert "where the table is" in log2  # the table was ahead of the committed offsets: it won
    assert run_summary(tmp_path / "run2.log")["dedup_hits"] == 0  # so nothing the table held was read again
    assert_exactly_once(spark, spec.table, produced)
    assert consumer_group_has_nothing_left(broker, spec.topic, spec.group)


def stop_gracefully(job: subprocess.Popen[bytes], log: Path, timeout_s: float = 120) -> None:
    """SIGTERM to the job's process group, as a supervisor stops it: it drains, then exits 143 (the JVM's)."""
    os.killpg(job.pid, signal.SIGTERM)
    rc = job.wait(timeout_s)
    text = log.read_text(errors="replace")
    assert rc in (0, 143) and "run ended:" in text, text[-3000:]


@pytest.mark.long  # CI time: the consumer group's kill between its two commits runs in CI
def test_a_second_job_joining_and_leaving_mid_run_loses_and_doubles_nothing(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(
        broker, f"cg-rebalance-{unique}", f"g-{unique}", tmp_path / "table", settings=(CONSUMER, FAST_SESSION)
    )
    broker.create_topic(spec.topic, partitions=4)
    produced = produce_json_events(broker.bootstrap, spec.topic, 2000)
    first = start_job(spec, "run.mode=continuous", "pump.members=2", log=tmp_path / "first.log")
    try:
        wait_for(
            lambda: list((spec.table / "_delta_log").glob("*.json")),
            120,
            "the first job made no commit",
            give_up=lambda: first.poll() is not None,
        )
        second = start_job(spec, "run.mode=continuous", "pump.members=2", log=tmp_path / "second.log")
        wait_for(
            lambda: "members started" in (tmp_path / "second.log").read_text(errors="replace"),
            120,
            "the second job did not start",
            give_up=lambda: second.poll() is not None,
        )
        produced += produce_json_events(broker.bootstrap, spec.topic, 15_000, start=2000, rate=1000)  # 15 s
        stop_gracefully(second, tmp_path / "second.log")
        produced += produce_json_events(broker.bootstrap, spec.topic, 5000, start=17_000, rate=1000)
        wait_for(
            lambda: spark.read.format("delta").load(str(spec.table)).count() >= len(produced),
            120,
            lambda: (
                f"{len(produced)} produced, the table holds {spark.read.format('delta').load(str(spec.table)).count()}"
            ),
            interval_s=1,
        )
    finally:
        stop_gracefully(first, tmp_path / "first.log")
    took = {name: run_summary(tmp_path / f"{name}.log")["accepted"] for name in ("first", "second")}
    assert took["first"] > 0 and took["second"] > 0, took  # the second job really took partitions
    assert_exactly_once(spark, spec.table, produced)
    assert consumer_group_has_nothing_left(broker, spec.topic, spec.group)


def test_a_table_moves_from_a_consumer_group_to_a_share_group_without_duplicates_or_gaps(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"cg-move-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, topic, 3000)
    (bad,) = produce_records(broker.bootstrap, topic, [(b"bad", b"\xff")])
    table = tmp_path / "t"
    text = "payload.format=text"
    before = run_ingest(spark, ingest_config(broker, topic, f"cg-{unique}", table, CONSUMER, text))
    assert before.accepted == 3000 and before.rejected == 1
    produced += produce_json_events(broker.bootstrap, topic, 3000, start=3000)

    # the move: the share group (a group id of its own) reads the topic from its start
    after = run_ingest(spark, ingest_config(broker, topic, f"sg-{unique}", table, text))
    # the first 3,000 known from the table, the poison record from the dead-letter table
    assert after.rows_written == 3000 and after.dedup_hits == 3000 and after.dead_letter_hits == 1
    rows = spark.read.format("delta").load(str(table)).select("partition", "offset")
    assert sorted((r[0], r[1]) for r in rows.collect()) == sorted((p.partition, p.offset) for p in produced)
    parked = spark.read.format("delta").load(str(tmp_path / "t_dead_letter")).collect()
    assert [(r["offset"], r["error_class"]) for r in parked] == [(bad.offset, "invalid_utf8")]  # once
    assert nothing_left(broker, topic, f"sg-{unique}")
