"""Bad input end to end: poison records, the delivery-count cap, and the dead-letter replay.

Real broker, real Delta tables. What a user checks: the main table holds exactly the good
records, parsed; the dead-letter table holds each bad one once with its error class; the share
group has nothing left to deliver; a replay after a fix lands the records once, even run twice.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events, produce_records
from sharelake.config.routes import resolve_routes
from sharelake.config.settings import SharelakeConfig
from sharelake.failures import faults
from sharelake.ops.replay import replay_dead_letters
from sharelake.run.pipeline import run_ingest
from sharelake.sink.dedup.cache import DedupCache
from sharelake.sink.dedup.commit_log import DeltaCommitLog
from sharelake.table.location import TableLocation
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.ingest_config import ingest_config
from tests.job_runner import JobSpec
from tests.kafka_helpers import nothing_left
from tests.test_dedup_cache import holds

SCHEMA = "id long, user string, amount double, kind string"
JSON = ("payload.format=json", f"payload.schema={SCHEMA}", 'payload.required_fields=["id", "user"]')


pytestmark = pytest.mark.usefixtures("clean_faults")  # fault points reset before each test (conftest)


def dead_letters(spark: SparkSession, cfg: SharelakeConfig) -> dict[tuple[int, int], dict[str, object]]:
    rows = spark.read.format("delta").load(resolve_routes(cfg).dead_letter.path).collect()
    out = {(r["partition"], r["offset"]): r.asDict() for r in rows}
    assert len(out) == len(rows), "a record is in the dead-letter table twice"
    return out


def test_poison_records_are_dead_lettered_once_and_the_good_ones_land_parsed(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"mixed-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2, config={"max.message.bytes": str(8 * 1024 * 1024)})
    good = produce_json_events(broker.bootstrap, topic, 2500)
    bad_values: dict[str, bytes | None] = {
        "malformed_json": b'{"id": 1, "user": ',
        "schema_mismatch": b'{"id": "not a number", "user": "u", "amount": 1.5, "kind": "view"}',
        "not_an_object": b"[1, 2, 3]",
        "invalid_utf8": b'{"id": 2, "user": "\xff\xfe"}',
        "null_value": None,
        "too_large": json.dumps({"id": 3, "user": "u", "blob": "x" * (3 * 1024 * 1024)}).encode(),
        "missing_required_field": b'{"id": 4, "amount": 2.0}',
    }
    bad = produce_records(
        broker.bootstrap, topic, ((name.encode(), v) for name, v in bad_values.items()), max_bytes=8 * 1024 * 1024
    )
    good += produce_json_events(broker.bootstrap, topic, 2500, start=2500)  # the stream goes on after them
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *JSON)
    summary = run_ingest(spark, cfg)

    # the main table: exactly the 5,000 good records, parsed into columns beside the Kafka metadata
    expected = spark.createDataFrame(
        [(p.topic, p.partition, p.offset, p.key, *json.loads(p.value or b"").values()) for p in good],
        f"topic string, partition int, offset long, key binary, {SCHEMA}",
    )
    actual = spark.read.format("delta").load(str(tmp_path / "t")).select(*expected.columns)
    assert actual.count() == 5000
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)

    # the dead-letter table: each bad record once, raw, with its class
    parked = dead_letters(spark, cfg)
    expected_class = {"not_an_object": "schema_mismatch"}
    assert {(p.partition, p.offset): expected_class.get(p.key.decode(), p.key.decode()) for p in bad} == {
        k: r["error_class"] for k, r in parked.items()
    }
    for p in bad:
        row = parked[(p.partition, p.offset)]
        assert row["value"] == p.value and row["key"] == p.key and row["topic"] == topic
        assert row["error_message"] and row["job"] and row["first_seen"] <= row["last_seen"]
    mismatch = next(r for r in parked.values() if r["key"] == b"schema_mismatch")
    assert "id (expected bigint)" in str(mismatch["error_message"])

    assert summary.accepted == 5000 and summary.rejected == 7 and summary.dead_lettered == 7
    assert summary.ack_errors == 0
    assert nothing_left(broker, topic, group)  # nothing left to deliver, nothing archived unseen


def test_a_record_failing_until_the_delivery_cap_is_dead_lettered_not_archived(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = f"cap-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=1)
    produced = produce_json_events(broker.bootstrap, topic, 3)
    # the Delta write fails for the first two deliveries (a transient failure: RELEASE, retry)
    monkeypatch.setenv(faults.ENV, "error@before_delta_commit#2")
    cfg = ingest_config(broker, topic, group, tmp_path / "t", "dead_letter.max_delivery_count=3")
    summary = run_ingest(spark, cfg)

    parked = dead_letters(spark, cfg)
    assert sorted(parked) == [(p.partition, p.offset) for p in produced]
    for row in parked.values():
        assert row["error_class"] == "delivery_count_exceeded" and row["delivery_count"] == 3
        assert row["first_seen"] < row["last_seen"]  # first seen by the first, failed attempt
    assert not DeltaTable.isDeltaTable(spark, str(tmp_path / "t"))  # nothing reached the main table
    assert summary.failed_attempts == 2 and summary.rejected == 3
    assert nothing_left(broker, topic, group)


def test_replay_after_a_schema_fix_lands_the_records_once_even_run_twice(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"replay-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=1)

    def qty(i: int) -> int:
        return 5_000_000_000 + i if i % 15 == 0 else i  # every 15th outgrew the declared int

    produced = produce_records(
        broker.bootstrap, topic, ((b"k%d" % i, json.dumps({"id": i, "qty": qty(i)}).encode()) for i in range(300))
    )
    table = tmp_path / "t"
    before = ingest_config(broker, topic, group, table, "payload.format=json", "payload.schema=id long, qty int")
    run_ingest(spark, before)
    assert {r["error_class"] for r in dead_letters(spark, before).values()} == {"schema_mismatch"}
    assert len(dead_letters(spark, before)) == 20

    # the fix: qty is a long; Delta widens the column (type widening on the table) when the job writes one
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    first = replay_dead_letters(spark, before, where="error_class = 'schema_mismatch'")
    assert first.published == 20 and first.topics == (topic,)
    # the second run, as users run it: the job under spark-submit; nothing is left to replay
    second = run_replay_job(JobSpec(broker, topic, group, table), tmp_path / "replay.log")
    assert "replay ended: published=0" in second

    after = ingest_config(broker, topic, group, table, "payload.format=json", "payload.schema=id long, qty long")
    run_ingest(spark, after)
    rows = spark.read.format("delta").load(str(table)).select("id", "qty")
    expected = spark.createDataFrame([(i, qty(i)) for i in range(300)], "id long, qty long")
    assert_df_equality(rows, expected, ignore_row_order=True, ignore_nullable=True)  # each once
    parked = dead_letters(spark, after)
    assert len(parked) == 20 and all(r["replayed_at"] and r["replayed_to"] == topic for r in parked.values())
    assert len(produced) == 300


def run_replay_job(spec: JobSpec, log: Path) -> str:
    args = spec.args(job="replay_dlq.py")
    proc = subprocess.run([*args, "--where", "error_class = 'schema_mismatch'"], capture_output=True, timeout=300)
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    log.write_text(out)
    assert proc.returncode == 0, out[-3000:]
    return out


def test_one_bad_record_among_thousands_is_the_only_one_dead_lettered(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    """The write job parses each value once and drops the bad ones from the same job: the commit
    holding the good records claims the bad record's offset too, and must not make it look landed."""
    topic, group = f"one-bad-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=1)  # one partition: the bad record sits inside the good ones' range
    good = produce_json_events(broker.bootstrap, topic, 3000)
    (bad,) = produce_records(broker.bootstrap, topic, [(b"bad", b'{"id": "not a number", "user": "u"}')])
    good += produce_json_events(broker.bootstrap, topic, 3000, start=3000)
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *JSON, "batch.max_records=100000")
    summary = run_ingest(spark, cfg)

    actual = spark.read.format("delta").load(str(tmp_path / "t")).select("partition", "offset")
    assert sorted((r["partition"], r["offset"]) for r in actual.collect()) == sorted(
        (p.partition, p.offset) for p in good
    )
    parked = dead_letters(spark, cfg)
    assert list(parked) == [(bad.partition, bad.offset)]
    assert parked[(bad.partition, bad.offset)]["error_class"] == "schema_mismatch"
    assert summary.accepted == 6000 and summary.rejected == 1 and summary.dead_lettered == 1
    assert summary.ack_errors == 0
    # a restarted job reads the partial commit back from the table: the bad offset is not in it
    restarted = DedupCache(DeltaCommitLog(spark, TableLocation.at(tmp_path / "t")))
    restarted.load()
    assert not holds(restarted, topic, bad.partition, bad.offset)
    assert holds(restarted, topic, bad.partition, bad.offset - 1) and holds(
        restarted, topic, bad.partition, bad.offset + 1
    )
    assert nothing_left(broker, topic, group)
