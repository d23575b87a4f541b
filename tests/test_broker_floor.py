"""The oldest broker Sharelake supports: the newest Kafka 4.2.x (share groups are production-ready from 4.2).

A broker of its own for this module, from the jars `make jars` resolved into .cache/jars/kafka-floor/.
What a user checks: the core ingest holds there (every record once through a kill -9, poison
records in the dead-letter table with their class, nothing left in the group), the delivery limit
the dead-letter cap is checked against is the broker's (4.2 has no group-level one), and a 4.4-only
setting stops the job at start with one line naming the broker version.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from devkit.paths import KAFKA_FLOOR_JARS
from devkit.sample_data import produce_json_events, produce_records
from sharelake.consume.share.group_settings import DELIVERY_LIMIT, read_group_settings
from sharelake.failures.errors import ConfigError
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.ingest_config import ingest_config
from tests.job_runner import JobSpec, drain_in_process, drain_job, run_summary
from tests.kafka_helpers import nothing_left

SCHEMA = "id long, user string, amount double, kind string"
JSON = ("payload.format=json", f"payload.schema={SCHEMA}")


@pytest.fixture(scope="module")
def floor_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    kafka = EmbeddedKafka(tmp_path_factory.mktemp("broker-floor"), jars=KAFKA_FLOOR_JARS)
    kafka.start()
    yield kafka
    kafka.stop()


def test_the_floor_broker_is_the_oldest_supported_release(floor_broker: EmbeddedKafka) -> None:
    (broker_jar,) = KAFKA_FLOOR_JARS.glob("kafka_2.13-*.jar")
    assert broker_jar.name.startswith("kafka_2.13-4.2.")
    # a 4.2 group has neither the delivery limit nor the in-flight cap: the broker's configs hold them
    admin = floor_broker.admin()
    assert DELIVERY_LIMIT not in read_group_settings(admin, "any-group")


def test_kill_mid_ingest_on_the_oldest_supported_broker_then_restart(
    floor_broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(floor_broker, f"floor-{unique}", f"g-{unique}", tmp_path / "table", settings=JSON)
    floor_broker.create_topic(spec.topic, partitions=2)
    good = produce_json_events(floor_broker.bootstrap, spec.topic, 3000)
    bad = produce_records(
        floor_broker.bootstrap, spec.topic, [(b"bad-json", b'{"id": 1, "user": '), (b"bad-type", b'{"id": "x"}')]
    )
    good += produce_json_events(floor_broker.bootstrap, spec.topic, 3000, start=3000)

    # kill -9 right after the second micro-batch's ACCEPT, before Spark records the batch
    rc = drain_job(spec, tmp_path / "run1.log", faults="kill@after_accept#2")
    log1 = (tmp_path / "run1.log").read_text(errors="replace")
    assert rc != 0, log1[-2000:]
    assert "delivery limit 5" in log1  # the broker's group.share.delivery.count.limit, read at start
    rows_after_crash = spark.read.format("delta").load(str(spec.table)).count()
    assert 0 < rows_after_crash < len(good)

    assert drain_in_process(spark, spec, tmp_path / "run2.log") == 0, (tmp_path / "run2.log").read_text()[-3000:]
    assert run_summary(tmp_path / "run2.log")["concurrent_claims"] == 0
    # every good record once, parsed (JSON keeps its columns, not the raw value)
    rows = spark.read.format("delta").load(str(spec.table)).select("topic", "partition", "offset", "key", "id")
    expected = spark.createDataFrame(
        [(p.topic, p.partition, p.offset, p.key, json.loads(p.value or b"")["id"]) for p in good],
        "topic string, partition int, offset long, key binary, id long",
    )
    assert rows.count() == len(good)
    assert_df_equality(rows, expected, ignore_row_order=True, ignore_nullable=True)
    parked = spark.read.format("delta").load(str(tmp_path / "table_dead_letter")).collect()
    classes = {(r["partition"], r["offset"]): r["error_class"] for r in parked}
    assert len(parked) == 2
    assert classes == {
        (bad[0].partition, bad[0].offset): "malformed_json",
        (bad[1].partition, bad[1].offset): "schema_mismatch",
    }
    assert nothing_left(floor_broker, spec.topic, spec.group)


def test_a_broker_dead_letter_topic_on_the_floor_broker_stops_the_job_naming_the_version(
    floor_broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"t-{unique}"
    floor_broker.create_topic(topic)
    cfg = ingest_config(floor_broker, topic, f"g-{unique}", tmp_path / "t", "kafka.broker_dead_letter_topic=dlq.t")
    with pytest.raises(ConfigError) as e:
        run_ingest(spark, cfg)
    message = str(e.value)
    assert message == (
        f"kafka.broker_dead_letter_topic = 'dlq.t': the broker at {floor_broker.bootstrap} runs Kafka older than 4.4 "
        "(its share groups have no errors.deadletterqueue.topic.name, KIP-1191); upgrade the brokers to 4.4 or "
        "later, or unset the key (Sharelake's dead-letter table works on every broker)"
    )
