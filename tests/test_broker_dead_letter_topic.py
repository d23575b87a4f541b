"""The share group's broker-side dead-letter topic (KIP-1191, Kafka 4.4): `kafka.broker_dead_letter_topic`.

Real 4.4 broker, real Delta tables. What a user checks: a record the broker archived while no job
ran is in the topic with the broker's headers, and the replay sends it back to its source once,
where the job lands it; a Sharelake REJECT is in the dead-letter table with its class and in the
topic too (its bytes only when copying is on); a topic the broker would silently not write to
stops the job at start with one line. The 4.2 broker's refusal is in tests/test_broker_floor.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from confluent_kafka import AcknowledgeType, Consumer, Message, ShareConsumer
from confluent_kafka.admin import ConfigResource, ResourceType
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events, produce_records
from sharelake.config.routes import resolve_routes
from sharelake.consume.share.broker_dead_letter_topic import TOPIC_ACCEPTS, ArchivedRecord
from sharelake.failures.errors import ConfigError
from sharelake.ops.replay import REPLAY_HEADER, replay_dead_letters
from sharelake.ops.replay_broker_topic import replay_broker_dead_letters
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka, KafkaBrokers
from tests.ingest_config import ingest_config
from tests.kafka_helpers import nothing_left

SCHEMA = "id long, user string, amount double, kind string"
JSON = ("payload.format=json", f"payload.schema={SCHEMA}")


def read_topic(broker: KafkaBrokers, topic: str, expect: int, seconds: float = 60) -> list[Message]:
    """Every record of `topic` from its start: at least `expect`, then 2 s more for any beyond them."""
    consumer = Consumer(
        {**broker.client_settings, "group.id": f"check-{time.time_ns()}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            got += [m for m in consumer.consume(100, 0.5) if m.error() is None]
            if len(got) >= expect:
                deadline = min(deadline, time.monotonic() + 2)
    finally:
        consumer.close()
    return got


def release_until_archived(broker: KafkaBrokers, topic: str, group: str, offset: int, seconds: float = 60) -> int:
    """A worker that is not Sharelake RELEASEs the record at `offset` each time it gets it, until the
    broker stops delivering it (the delivery limit); returns how often it was delivered."""
    consumer = ShareConsumer({**broker.client_settings, "group.id": group, "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    deliveries, quiet_since = 0, time.monotonic()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and (deliveries == 0 or time.monotonic() - quiet_since < 5):
            polled = consumer.poll(0.5)
            for m in polled:
                if m.error() is None and m.offset() == offset:
                    deliveries += 1
                    quiet_since = time.monotonic()
                    consumer.acknowledge(m, AcknowledgeType.RELEASE)
                elif m.error() is None:
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            if len(polled):
                consumer.commit_sync()
    finally:
        consumer.close()
    return deliveries


def test_a_record_past_the_delivery_limit_while_no_job_runs_reaches_the_topic_and_replays_once(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group, dlq = f"src-{unique}", f"g-{unique}", f"dlq.{unique}"
    broker.create_topic(topic, partitions=1)
    produced = produce_json_events(broker.bootstrap, topic, 20)
    table = tmp_path / "t"
    # the first run sets the group's dead-letter topic (and creates the topic, marked) and lands the 20
    cfg = ingest_config(broker, topic, group, table, *JSON, f"kafka.broker_dead_letter_topic={dlq}")
    run_ingest(spark, cfg)
    assert spark.read.format("delta").load(str(table)).count() == 20

    # no job runs; a worker of another kind keeps releasing one record until the broker archives it
    (late,) = produce_records(broker.bootstrap, topic, [(b"late", b'{"id": 999, "user": "u9", "amount": 9.5}')])
    limit = 5  # the group's share.delivery.count.limit (broker default)
    assert release_until_archived(broker, topic, group, late.offset) == limit

    (copy,) = read_topic(broker, dlq, expect=1)
    origin = ArchivedRecord.from_headers(copy.headers())  # type: ignore[arg-type]
    assert origin is not None
    assert (origin.topic, origin.partition, origin.offset, origin.group) == (topic, 0, late.offset, group)
    assert origin.delivery_count == limit and "delivery count" in origin.message
    assert (copy.key(), copy.value()) == (late.key, late.value)  # copying is on by default

    # the replay sends it back to its source once, however often it runs; the job then lands it
    first = replay_broker_dead_letters(cfg)
    assert (first.published, first.topics) == (1, (topic,))
    assert replay_broker_dead_letters(cfg).published == 0
    run_ingest(spark, cfg)
    rows = spark.read.format("delta").load(str(table))
    expected = spark.createDataFrame(
        [(p.key, json.loads(p.value or b"")["id"]) for p in [*produced, late]], "key binary, id long"
    )
    assert_df_equality(rows.select("key", "id"), expected, ignore_row_order=True, ignore_nullable=True)
    replayed = rows.where("id = 999").select("offset", "headers").first()
    assert replayed is not None and replayed["offset"] > late.offset
    assert {h["key"]: h["value"] for h in replayed["headers"]}[REPLAY_HEADER] == f"{topic}/0/{late.offset}".encode()
    assert nothing_left(broker, topic, group)


@pytest.mark.parametrize("copy_record", [True, False])
def test_a_sharelake_reject_is_in_the_table_with_its_class_and_in_the_topic(
    copy_record: bool, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group, dlq = f"rej-{unique}", f"g-{unique}", f"dlq.{unique}"
    broker.create_topic(topic, partitions=1)
    broker.create_topic(dlq, partitions=1, config={TOPIC_ACCEPTS: "true"})  # made by the user: the job keeps it
    produce_json_events(broker.bootstrap, topic, 50)
    (bad,) = produce_records(broker.bootstrap, topic, [(b"bad", b'{"id": 1, "user": ')])
    produce_json_events(broker.bootstrap, topic, 50, start=50)
    settings = (
        f"kafka.broker_dead_letter_topic={dlq}",
        f"kafka.broker_dead_letter_copy_record={str(copy_record).lower()}",
    )
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *JSON, *settings)
    summary = run_ingest(spark, cfg)
    assert summary.rejected == 1

    dead = resolve_routes(cfg).dead_letter
    assert dead is not None
    parked = spark.read.format("delta").load(dead.path).collect()
    assert [(r["offset"], r["error_class"], r["value"]) for r in parked] == [(bad.offset, "malformed_json", bad.value)]
    (archived,) = read_topic(broker, dlq, expect=1)
    origin = ArchivedRecord.from_headers(archived.headers())  # type: ignore[arg-type]
    assert origin is not None and (origin.topic, origin.offset, origin.group) == (topic, bad.offset, group)
    assert "rejected" in origin.message
    expected = (bad.key, bad.value) if copy_record else (None, None)
    assert (archived.key(), archived.value()) == expected
    assert spark.read.format("delta").load(str(tmp_path / "t")).count() == 100


def test_dead_letters_to_the_broker_topic_alone_write_no_table_and_log_each_class(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`dead_letter.sink = "broker_topic"`: the bad records are REJECTed without a dead-letter table
    and the broker copies them to the group's topic; each one's error class is a line of the log."""
    topic, group, dlq = f"only-{unique}", f"g-{unique}", f"dlq.{unique}"
    broker.create_topic(topic, partitions=2)
    good = produce_json_events(broker.bootstrap, topic, 60)
    bad = produce_records(
        broker.bootstrap, topic, [(b"bad-json", b'{"id": 1, "user": '), (b"bad-type", b'{"id": "x"}')]
    )
    good += produce_json_events(broker.bootstrap, topic, 60, start=60)
    table = tmp_path / "t"
    settings = (f"kafka.broker_dead_letter_topic={dlq}", "dead_letter.sink=broker_topic")
    cfg = ingest_config(broker, topic, group, table, *JSON, *settings)
    with caplog.at_level("WARNING", logger="sharelake.sink.dead_letter.broker_topic"):
        summary = run_ingest(spark, cfg)

    assert summary.rejected == 2
    rows = spark.read.format("delta").load(str(table)).select("partition", "offset", "id")
    expected = spark.createDataFrame(
        [(p.partition, p.offset, json.loads(p.value or b"")["id"]) for p in good], "partition int, offset long, id long"
    )
    assert_df_equality(rows, expected, ignore_row_order=True, ignore_nullable=True)
    assert not (tmp_path / "t_dead_letter").exists()  # the default dead-letter table's path: nothing written
    archived = read_topic(broker, dlq, expect=2)
    origins = [ArchivedRecord.from_headers(m.headers()) for m in archived]  # type: ignore[arg-type]
    assert sorted((o.partition, o.offset) for o in origins if o is not None) == sorted(
        (b.partition, b.offset) for b in bad
    )
    assert all(o is not None and "rejected" in o.message and o.group == group for o in origins)
    assert {(m.key(), m.value()) for m in archived} == {(b.key, b.value) for b in bad}  # copied by default
    for record, error_class in zip(bad, ("malformed_json", "schema_mismatch"), strict=True):
        line = f"dead letter {topic}-{record.partition}@{record.offset} ({error_class}) to the broker's topic {dlq}"
        assert line in caplog.text
    assert nothing_left(broker, topic, group)
    with pytest.raises(ConfigError, match="not a table; replay them with --from-broker-topic"):
        replay_dead_letters(spark, cfg)  # there is no table to replay from


def test_a_topic_the_broker_would_not_write_to_stops_the_job_at_start(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"t-{unique}"
    broker.create_topic(topic)
    broker.create_topic(f"dlq.plain-{unique}")  # without errors.deadletterqueue.group.enable

    def start_error(dlq: str) -> str:
        cfg = ingest_config(broker, topic, f"g-{unique}", tmp_path / "t", f"kafka.broker_dead_letter_topic={dlq}")
        with pytest.raises(ConfigError) as e:
            run_ingest(spark, cfg)
        assert "\n" not in str(e.value)
        return str(e.value)

    unmarked = start_error(f"dlq.plain-{unique}")
    assert unmarked.startswith(f"kafka.broker_dead_letter_topic = 'dlq.plain-{unique}': the topic does not accept")
    assert f"--add-config {TOPIC_ACCEPTS}=true" in unmarked
    unprefixed = start_error(f"dead-{unique}")
    assert "starts with 'dlq.' (its errors.deadletterqueue.topic.name.prefix); name it dlq.dead-" in unprefixed
    # neither start changed the group, nor created a topic
    assert f"dead-{unique}" not in broker.admin().list_topics(timeout=10).topics
    admin = broker.admin()  # held: its futures fail once it is collected
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, f"g-{unique}")]).values()
    assert future.result(timeout=30)["errors.deadletterqueue.topic.name"].value == ""
