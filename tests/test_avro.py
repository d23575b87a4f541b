"""Avro in the Confluent wire format, end to end: real broker, real schema registry, real Delta.

Records are produced as users' producers do (confluent-kafka's AvroSerializer against the embedded
Apicurio registry). What a user checks: the table holds exactly the good records, decoded into
columns; a second schema version adds its column and the older rows read null; each kind of bad
record is in the dead-letter table once with its class; a registry outage loses, duplicates and
dead-letters nothing; the group has nothing left to deliver (a sentinel proves it).
"""

from __future__ import annotations

import io
import json
import struct
import threading
import time
from pathlib import Path
from typing import Any

import fastavro
import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from devkit.sample_data import (
    EVENT_AVRO_SCHEMA,
    EVENT_AVRO_SCHEMA_V2,
    Produced,
    avro_values,
    event_record,
    produce_records,
)
from sharelake.config.routes import resolve_routes
from sharelake.failures.errors import ConfigError, DependencyOutage
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry
from tests.ingest_config import ingest_config
from tests.job_runner import JobSpec, run_job, run_summary
from tests.kafka_helpers import nothing_left
from tests.table_checks import EVENT_COLUMNS, dead_letter_rows, dead_letters_by_key, event_rows
from tests.test_record_keys import KEY_SCHEMA, avro_keys
from tests.waiting import wait_for

pytestmark = pytest.mark.usefixtures("clean_faults")  # fault points reset before each test (conftest)


def avro_settings(registry: EmbeddedSchemaRegistry, *extra: str) -> tuple[str, ...]:
    return ("payload.format=avro", f"payload.registry.url={registry.url}", *extra)


def produce_events(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, topic: str, ids: range, v2: bool = False
) -> list[Produced]:
    schema = EVENT_AVRO_SCHEMA_V2 if v2 else EVENT_AVRO_SCHEMA
    values = avro_values(registry.url, topic, schema, (event_record(i, region=v2) for i in ids))
    return produce_records(broker.bootstrap, topic, ((f"k-{i}".encode(), v) for i, v in zip(ids, values, strict=True)))


def expected_rows(produced: list[Produced], ids: range, region: bool) -> list[tuple[Any, ...]]:
    """The rows of `produced` (keyed `k-<i>`, delivery reports come per partition, not in order)."""
    assert sorted(int(p.key.decode().removeprefix("k-")) for p in produced) == list(ids)
    return event_rows(produced, region)


def test_two_schema_versions_land_exactly_once_and_the_new_field_becomes_a_column(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"avro-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    first, second = range(0, 3000), range(3000, 6000)
    old = produce_events(broker, registry, topic, first)
    new = produce_events(broker, registry, topic, second, v2=True)  # adds `region`: a second schema id
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *avro_settings(registry))
    summary = run_ingest(spark, cfg)

    table = spark.read.format("delta").load(str(tmp_path / "t"))
    assert table.schema["region"].nullable  # the new field became a nullable column, no DDL
    expected = spark.createDataFrame(
        expected_rows(old, first, region=False) + expected_rows(new, second, region=True),
        f"{EVENT_COLUMNS}, region string",
    )
    actual = table.select(*expected.columns)
    assert actual.count() == 6000
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)  # old rows: region null
    # both schema ids were read in one micro-batch (the backlog held both when the job started)
    mixed = table.groupBy("batch_id").agg({"region": "count", "*": "count"}).collect()
    assert any(0 < r["count(region)"] < r["count(1)"] for r in mixed), mixed
    assert summary.dead_lettered == 0 and summary.released == 0
    assert nothing_left(broker, topic, group)


def test_each_bad_avro_record_is_dead_lettered_once_with_its_class(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"avro-bad-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    good = produce_events(broker, registry, topic, range(0, 2000))
    # a writer that turns `amount` into a string: Avro cannot read it into the table's double column
    changed = json.loads(EVENT_AVRO_SCHEMA)
    changed["fields"][2] = {"name": "amount", "type": "string"}
    (incompatible,) = avro_values(
        registry.url, f"{topic}-changed", json.dumps(changed), [{**event_record(1), "amount": "12.50"}]
    )
    known_id = struct.unpack(">I", next(avro_values(registry.url, topic, EVENT_AVRO_SCHEMA, [event_record(2)]))[1:5])[0]
    bad_values = {
        "not_wire_format": b"\x01\x00\x00\x00\x01abc",  # magic byte 1
        "too_short": b"\x00\x00",  # not_wire_format as well
        "unknown_schema_id": b"\x00" + struct.pack(">I", 987_654) + b"\x02",
        "avro_decode_failed": b"\x00" + struct.pack(">I", known_id) + b"\x02",  # id, then a truncated body
        "schema_incompatible": incompatible,
    }
    bad = produce_records(broker.bootstrap, topic, ((name.encode(), v) for name, v in bad_values.items()))
    good += produce_events(broker, registry, topic, range(2000, 4000))
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *avro_settings(registry))
    summary = run_ingest(spark, cfg)

    actual = spark.read.format("delta").load(str(tmp_path / "t")).select("offset", "partition", "id")
    assert actual.count() == 4000
    assert actual.select("partition", "offset").distinct().count() == 4000
    assert sorted(r["id"] for r in actual.collect()) == list(range(4000))

    by_key = dead_letters_by_key(spark, resolve_routes(cfg).dead_letter.path)  # each once
    assert len(by_key) == len(bad_values)
    classes = {name: by_key[name]["error_class"] for name in bad_values}
    assert classes == {
        "not_wire_format": "not_wire_format",
        "too_short": "not_wire_format",
        "unknown_schema_id": "unknown_schema_id",
        "avro_decode_failed": "avro_decode_failed",
        "schema_incompatible": "schema_incompatible",
    }
    message = by_key["schema_incompatible"]["error_message"]
    assert "amount" in message and "double" in message and "string" in message, message
    assert {k: bytes(r["value"]) for k, r in by_key.items()} == {k: v for k, v in bad_values.items()}  # raw
    assert {(p.partition, p.offset) for p in bad} == {(r["partition"], r["offset"]) for r in by_key.values()}
    assert summary.dead_lettered == len(bad_values)
    assert nothing_left(broker, topic, group)


def test_plain_avro_bodies_read_with_a_fixed_schema(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"avro-plain-{unique}", f"g-{unique}"
    broker.create_topic(topic)
    parsed = fastavro.parse_schema(json.loads(EVENT_AVRO_SCHEMA))

    def body(i: int) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, event_record(i))
        return out.getvalue()

    good = produce_records(broker.bootstrap, topic, ((f"k-{i}".encode(), body(i)) for i in range(500)))
    produce_records(broker.bootstrap, topic, [(b"broken", b"\x02")])
    schema_file = tmp_path / "event.avsc"
    schema_file.write_text(EVENT_AVRO_SCHEMA)
    cfg = ingest_config(
        broker,
        topic,
        group,
        tmp_path / "t",
        "payload.format=avro",
        f"payload.avro_schema=file:{schema_file}",
        'payload.required_fields=["id"]',
    )
    summary = run_ingest(spark, cfg)
    expected = spark.createDataFrame(expected_rows(good, range(500), region=False), f"{EVENT_COLUMNS}, region string")
    actual = spark.read.format("delta").load(str(tmp_path / "t")).select(*expected.columns[:-1])
    assert_df_equality(actual, expected.drop("region"), ignore_row_order=True, ignore_nullable=True)
    parked = spark.read.format("delta").load(resolve_routes(cfg).dead_letter.path).collect()
    assert [(r["key"], r["error_class"]) for r in parked] == [(b"broken", "avro_decode_failed")]
    assert "payload.avro_schema" in parked[0]["error_message"]
    assert summary.dead_lettered == 1


def test_a_registry_outage_mid_run_loses_duplicates_and_dead_letters_nothing(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"avro-outage-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    before = produce_events(broker, registry, topic, range(0, 1000))
    # the second version's values are serialized (and its schema registered) before the outage; they
    # reach the broker during it, so the job meets a schema id it has never fetched while it is down
    ids = range(1000, 3000)
    later = list(avro_values(registry.url, topic, EVENT_AVRO_SCHEMA_V2, (event_record(i, True) for i in ids)))
    cfg = ingest_config(
        broker,
        topic,
        group,
        tmp_path / "t",
        *avro_settings(registry, "payload.registry.timeout_s=1"),
        "batch.write_attempts=8",
    )
    result: dict[str, Any] = {}
    job = threading.Thread(target=lambda: result.update(summary=run_ingest(spark, cfg)), daemon=True)
    job.start()
    table = tmp_path / "t"
    wait_for(  # the first batch landed
        (table / "_delta_log").exists, 120, "the job landed nothing before the outage", interval_s=0.2,
        give_up=lambda: not job.is_alive(),
    )  # fmt: skip
    registry.pause()  # the registry hangs: every request times out
    try:
        keyed = ((f"k-{i}".encode(), v) for i, v in zip(ids, later, strict=True))
        after = produce_records(broker.bootstrap, topic, keyed)
        paused_at = time.monotonic()
        while time.monotonic() - paused_at < 6:  # the job keeps failing to fetch the new id meanwhile
            time.sleep(0.2)
    finally:
        registry.resume()
    job.join(240)
    assert not job.is_alive(), "the job did not finish after the registry came back"
    summary = result["summary"]

    actual = spark.read.format("delta").load(str(table)).select("partition", "offset", "id", "region")
    assert actual.count() == 3000  # 0 lost
    assert actual.select("partition", "offset").distinct().count() == 3000  # 0 duplicates
    assert {(p.partition, p.offset) for p in before + after} == {
        (r["partition"], r["offset"]) for r in actual.collect()
    }
    assert dead_letter_rows(spark, table) == 0  # 0 dead-lettered: the outage was not the records' fault
    assert summary.failed_attempts >= 1 and summary.released >= 1  # it really met the outage
    assert nothing_left(broker, topic, group)


def test_a_registry_down_at_start_is_waited_for_and_one_that_does_not_resolve_stops_the_job(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"avro-noreg-{unique}"
    broker.create_topic(topic)
    # nothing listens on the discard port: an outage (a registry not up yet), waited for up to 2 s here
    url = "http://127.0.0.1:9/apis/ccompat/v7"
    down = (f"payload.registry.url={url}", "run.dependency_wait_s=2")
    cfg = ingest_config(broker, topic, f"g-{unique}", tmp_path / "t", "payload.format=avro", *down)
    with pytest.raises(DependencyOutage) as outage:
        run_ingest(spark, cfg)
    line = str(outage.value)
    assert "\n" not in line
    assert line.startswith(f"payload.registry.url = '{url}': unreachable"), line
    assert line.endswith("still down after run.dependency_wait_s = 2s"), line
    # a host that does not resolve is a wrong setting: the one line at once, not a wait
    url = "http://no-such-registry.invalid:8081"
    cfg = ingest_config(
        broker, topic, f"g-{unique}", tmp_path / "t", "payload.format=avro", f"payload.registry.url={url}"
    )
    with pytest.raises(ConfigError) as wrong:
        run_ingest(spark, cfg)
    assert str(wrong.value).startswith(f"payload.registry.url = '{url}': unreachable"), str(wrong.value)


def test_a_registry_hung_when_the_job_starts_is_waited_for_then_every_record_lands_once(
    broker: EmbeddedKafka,
    registry: EmbeddedSchemaRegistry,
    spark: SparkSession,
    tmp_path: Path,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, group = f"avro-hung-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_events(broker, registry, topic, range(0, 1000))
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *avro_settings(registry, "payload.registry.timeout_s=1"))
    result: dict[str, Any] = {}
    registry.pause()  # hung: it takes connections and never answers (as a registry mid-GC or restart does)
    try:
        job = threading.Thread(target=lambda: result.update(summary=run_ingest(spark, cfg)), daemon=True)
        job.start()
        wait_for(
            lambda: "waiting for a dependency: payload.registry.url" in caplog.text, 120,
            lambda: f"the start did not wait for the hung registry:\n{caplog.text[-2000:]}",
            give_up=lambda: not job.is_alive(),
        )  # fmt: skip
    finally:
        registry.resume()
    job.join(180)
    assert "summary" in result, caplog.text[-3000:]
    rows = expected_rows(produced, range(1000), region=False)
    expected = spark.createDataFrame(rows, f"{EVENT_COLUMNS}, region string").drop("region")
    actual = spark.read.format("delta").load(str(tmp_path / "t")).select(*expected.columns)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    assert dead_letter_rows(spark, tmp_path / "t") == 0
    assert nothing_left(broker, topic, group)


def test_the_registry_password_never_appears_in_the_job_log(
    broker: EmbeddedKafka,
    registry: EmbeddedSchemaRegistry,
    tmp_path: Path,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = f"avro-secret-{unique}", f"g-{unique}"
    broker.create_topic(topic)
    produce_events(broker, registry, topic, range(200))
    secret = f"pw-{unique}-do-not-log"
    spec = JobSpec(broker, topic, group, tmp_path / "t")
    log = tmp_path / "job.log"
    monkeypatch.setenv("SHARELAKE_TEST_REGISTRY_PW", secret)  # the job reads it: env:, never the command line
    code = run_job(
        spec,
        *avro_settings(
            registry,
            "payload.registry.basic_auth_user=ingest",
            "payload.registry.basic_auth_password=env:SHARELAKE_TEST_REGISTRY_PW",
        ),
        "run.mode=until-drained",
        "run.idle_timeout_ms=3000",
        log=log,
    )
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert run_summary(log)["rows_written"] == 200
    assert f"registry {registry.url} (basic auth)" in text  # the banner names the URL, not the credentials
    assert secret not in text


def test_strings_that_are_not_utf8_in_values_and_keys_are_dead_lettered_as_invalid_utf8(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    """Avro's strings are UTF-8 (the spec says so, and Avro's decoder does not check): a value or an
    Avro key holding other bytes in a string, at the top or inside an array or a map, is a dead letter
    of its own class, never a row a reader may decode one way or another."""
    topic, group = f"avro-utf8-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    nested = json.loads(EVENT_AVRO_SCHEMA)
    nested["fields"] += [
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}], "default": None},
        {"name": "attrs", "type": ["null", {"type": "map", "values": "string"}], "default": None},
    ]
    ids = range(200)
    keys = list(avro_keys(registry.url, topic, KEY_SCHEMA, ({"customer": f"c-{i}"} for i in ids)))
    values = list(avro_values(registry.url, topic, EVENT_AVRO_SCHEMA, (event_record(i) for i in ids)))
    good = produce_records(broker.bootstrap, topic, zip(keys, values, strict=True))
    # one string of each record written as "@@" (length 2: zigzag 4), then given two bytes no UTF-8 decoder
    # accepts in its place: the body still decodes, its string does not
    marked = {
        "user": (EVENT_AVRO_SCHEMA, {"user": "@@"}),
        "tags": (json.dumps(nested), {"tags": ["t", "@@"]}),
        "map_key": (json.dumps(nested), {"attrs": {"@@": "v"}}),
        "map_value": (json.dumps(nested), {"attrs": {"k": "@@"}}),
    }
    bad_values = {}
    for n, (name, (schema, fields)) in enumerate(marked.items()):
        (value,) = avro_values(registry.url, topic, schema, [{**event_record(500 + n), **fields}])
        assert value.count(b"\x04@@") == 1, value
        bad_values[name] = value.replace(b"\x04@@", b"\x04\xff\xfe")
    (marked_key,) = avro_keys(registry.url, topic, KEY_SCHEMA, [{"customer": "@@"}])
    assert marked_key.count(b"\x04@@") == 1
    bad_key = marked_key.replace(b"\x04@@", b"\x04\xff\xfe")
    produce_records(
        broker.bootstrap, topic, [*((keys[0], value) for value in bad_values.values()), (bad_key, values[1])]
    )
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *avro_settings(registry, "payload.key_format=avro"))
    summary = run_ingest(spark, cfg)

    table = spark.read.format("delta").load(str(tmp_path / "t"))
    assert sorted(r["id"] for r in table.select("id").collect()) == list(ids)  # the good records, once each
    dead = spark.read.format("delta").load(resolve_routes(cfg).dead_letter.path).collect()
    by_value = {bytes(r["value"]): (r["error_class"], r["error_message"]) for r in dead}  # the raw bytes
    assert len(by_value) == len(dead) == 5  # each once
    assert {name: by_value[value] for name, value in bad_values.items()} == {
        "user": ("invalid_utf8", "not valid UTF-8 in field user"),
        "tags": ("invalid_utf8", "not valid UTF-8 in field tags[]"),
        "map_key": ("invalid_utf8", "not valid UTF-8 in field attrs{key}"),
        "map_value": ("invalid_utf8", "not valid UTF-8 in field attrs{value}"),
    }
    assert by_value[values[1]] == ("key_invalid_utf8", "the key: not valid UTF-8 in field customer")
    assert summary.dead_lettered == 5 and summary.rows_written == len(good)
    assert nothing_left(broker, topic, group)
