"""Several topics, each into its own table, from one job: real broker, registry and Delta, a kill -9.

Three topics in three formats (JSON, Avro through the registry, text) routed by `[topics.<name>]`
sections, one share group, one shared dead-letter table. The job is killed right after a table's
commit in its second micro-batch (committed, not ACCEPTed), then run again. What a user checks:
each table holds exactly its topic's good records, parsed; the dead-letter table holds each bad
record once with its class and topic; no topic has anything left to deliver (a sentinel each).

A slow table holds back no other: with an upserted table's MERGE held, an appended table beside it
still lands all its records, round after round (each table has its own members and lane).
"""

from __future__ import annotations

from pathlib import Path

from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from devkit.sample_data import (
    EVENT_AVRO_SCHEMA,
    EVENT_SCHEMA,
    Produced,
    avro_values,
    event_record,
    produce_json_events,
    produce_records,
)
from sharelake.sink.write.destinations import counter_prefix
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry
from tests.job_runner import JobSpec, drain_in_process, run_job, run_summary, start_job
from tests.kafka_helpers import nothing_left
from tests.waiting import wait_for

RECORDS = 2000  # per topic


def landed(spark: SparkSession, table: Path, produced: list[Produced], value: str) -> None:
    """The table holds exactly `produced`, each once, with `value` (a column) read from the record."""
    df = spark.read.format("delta").load(str(table))
    total, distinct = df.count(), df.select("partition", "offset").distinct().count()
    assert total == distinct, f"{table.name}: {total - distinct} duplicate rows"
    assert total == len(produced), f"{table.name}: {total} rows for {len(produced)} records"
    index = {p.key: int(p.key.decode().removeprefix("k-")) for p in produced}
    if value == "id":
        rows = [(p.topic, p.partition, p.offset, p.key, index[p.key]) for p in produced]
        expected = spark.createDataFrame(rows, "topic string, partition int, offset long, key binary, id long")
    else:
        rows = [(p.topic, p.partition, p.offset, p.key, (p.value or b"").decode()) for p in produced]
        expected = spark.createDataFrame(rows, "topic string, partition int, offset long, key binary, value string")
    actual = df.select(*expected.columns)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_three_topics_in_three_formats_land_in_their_own_tables_exactly_once_across_a_kill(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    json_topic, avro_topic, text_topic = (f"routed-{kind}-{unique}" for kind in ("json", "avro", "text"))
    for topic in (json_topic, avro_topic, text_topic):
        broker.create_topic(topic, partitions=2)
    ids = range(RECORDS)
    events = produce_json_events(broker.bootstrap, json_topic, RECORDS)
    avro = produce_records(
        broker.bootstrap,
        avro_topic,
        zip(
            (f"k-{i}".encode() for i in ids),
            avro_values(registry.url, avro_topic, EVENT_AVRO_SCHEMA, (event_record(i) for i in ids)),
            strict=True,
        ),
    )
    lines = produce_records(broker.bootstrap, text_topic, ((f"k-{i}".encode(), f"line {i}".encode()) for i in ids))
    bad = {
        json_topic: (b'{"id": 1, "user": ', "malformed_json"),
        avro_topic: (b"\x01not avro", "not_wire_format"),
        text_topic: (b"\xff\xfe", "invalid_utf8"),
    }
    for topic, (value, _) in bad.items():
        produce_records(broker.bootstrap, topic, [(b"bad", value)])

    tables = {json_topic: tmp_path / "events", avro_topic: tmp_path / "avro_events", text_topic: tmp_path / "lines"}
    routing = (
        "payload.format=json",  # the default section: what the topics share
        f"payload.schema={EVENT_SCHEMA}",
        f"topics.{avro_topic}.payload.format=avro",
        f"topics.{avro_topic}.payload.registry.url={registry.url}",
        f"topics.{text_topic}.payload.format=text",
    )
    spec = JobSpec(
        broker,
        "",
        f"g-{unique}",
        tmp_path / "dead_letter",
        lock_ms=10_000,
        checkpoint=tmp_path / "clock",
        routes=tables,
        settings=routing,
    )
    # the fourth table commit dies after it is durable and before its records are ACCEPTed (the
    # first micro-batch made three, one per table)
    first = tmp_path / "run1.log"
    rc = run_job(
        spec, "run.mode=until-drained", "run.idle_timeout_ms=8000", faults="kill@after_delta_commit#4", log=first
    )
    assert rc != 0, first.read_text()[-3000:]
    made = [str(t) for t in tables.values() if DeltaTable.isDeltaTable(spark, str(t))]
    written = sum(spark.read.format("delta").load(t).count() for t in made)
    assert 0 < written < 3 * RECORDS, written

    # the restart only has to finish the work: a fresh start of the pipeline in this session (no driver JVM
    # of its own to start: 12 s of CI time), as the crash tests' restarts (tests/job_runner.py)
    second = tmp_path / "run2.log"
    assert drain_in_process(spark, spec, second, idle_ms=8000) == 0, second.read_text()[-3000:]
    landed(spark, tables[json_topic], events, "id")
    landed(spark, tables[avro_topic], avro, "id")
    landed(spark, tables[text_topic], lines, "value")

    parked = spark.read.format("delta").load(str(spec.table)).collect()
    assert sorted((r["topic"], r["error_class"]) for r in parked) == sorted((t, c) for t, (_, c) in bad.items())
    summary = run_summary(second)
    assert summary["concurrent_claims"] == 0
    # each table counts its own rows: together, what the first run had not written
    assert sum(summary.get(f"{counter_prefix(t)}rows_written", 0) for t in tables) == 3 * RECORDS - written, summary
    for topic in tables:
        assert nothing_left(broker, topic, spec.group), topic


def test_a_held_upsert_table_holds_back_no_append_table_beside_it(
    spark: SparkSession, broker: EmbeddedKafka, tmp_path: Path, unique: str
) -> None:
    appends, upserts = f"lane-appends-{unique}", f"lane-upserts-{unique}"
    broker.create_topic(appends, partitions=2)
    broker.create_topic(upserts, partitions=1)
    events = produce_json_events(broker.bootstrap, appends, RECORDS)
    users = produce_json_events(broker.bootstrap, upserts, 50)
    tables = {appends: tmp_path / "events", upserts: tmp_path / "users"}
    spec = JobSpec(broker, "", f"g-{unique}", tmp_path / "dead_letter", lock_ms=60_000, routes=tables)
    go = tmp_path / "merge-go"
    log = tmp_path / "job.log"
    proc = start_job(
        spec,
        "payload.format=json",
        f"payload.schema={EVENT_SCHEMA}",
        f"topics.{upserts}.write.mode=upsert",
        f'topics.{upserts}.write.keys=["id"]',
        "kafka.partition_max_record_locks=200",  # the appends need 5 rounds or more: 400 records in flight
        "run.mode=until-drained",
        "run.idle_timeout_ms=4000",
        faults=f"wait@before_delta_merge={go}",  # the upserted table's first write waits for `go`
        log=log,
    )
    try:

        def appended() -> int:
            if not DeltaTable.isDeltaTable(spark, str(tables[appends])):
                return 0
            return spark.read.format("delta").load(str(tables[appends])).count()

        held = go.with_name(go.name + ".waiting")
        wait_for(held.exists, 240, lambda: f"the MERGE never began: {log.read_text()[-3000:]}", give_up=proc.poll)
        wait_for(
            lambda: appended() == RECORDS,
            120,
            lambda: f"{appended()} of {RECORDS} appended while the MERGE was held: {log.read_text()[-3000:]}",
            give_up=proc.poll,
        )
        assert not DeltaTable.isDeltaTable(spark, str(tables[upserts]))  # still held: nothing upserted yet
        go.touch()
        assert proc.wait(240) == 0, log.read_text()[-3000:]
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    landed(spark, tables[appends], events, "id")
    landed(spark, tables[upserts], users, "id")  # one record per id: the upsert keeps each
    assert nothing_left(broker, appends, spec.group)
    assert nothing_left(broker, upserts, spec.group)
