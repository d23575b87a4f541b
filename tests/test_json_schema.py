"""JSON Schema in the Confluent wire format, end to end: real broker, real schema registry, real Delta.

Records are produced as users' producers do (confluent-kafka's JSONSerializer against the embedded
Apicurio registry, which registers each schema and validates each record). What a user checks: the
table holds exactly the good records, read into columns; a second schema version adds its column
and the older rows read null in it; each kind of bad record is in the dead-letter table once with
its class; the group has nothing left to deliver.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from devkit.sample_data import EVENT_AVRO_SCHEMA, Produced, avro_values, event_record, produce_records
from sharelake.config.routes import resolve_routes
from sharelake.run.pipeline import payload_note, run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry
from tests.ingest_config import ingest_config
from tests.kafka_helpers import nothing_left
from tests.table_checks import EVENT_COLUMNS, dead_letters_by_key, event_rows

EVENT_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Event",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "user": {"type": "string"},
        "amount": {"type": "number"},
        "kind": {"type": "string"},
    },
    "required": ["id", "user", "amount", "kind"],
}
# the second version: an optional field (BACKWARD compatible), which becomes a column
EVENT_SCHEMA_V2 = {**EVENT_SCHEMA, "properties": {**EVENT_SCHEMA["properties"], "region": {"type": ["string", "null"]}}}

pytestmark = pytest.mark.usefixtures("clean_faults")  # fault points reset before each test (conftest)


def json_values(
    registry_url: str, topic: str, schema: dict[str, Any], records: Iterable[dict[str, Any]]
) -> Iterator[bytes]:
    """`records` in the Confluent wire format, `schema` registered under `<topic>-value`."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": registry_url}))
    context = SerializationContext(topic, MessageField.VALUE)
    for record in records:
        value = serializer(record, context)
        assert value is not None
        yield value


def produce_events(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, topic: str, ids: range, v2: bool = False
) -> list[Produced]:
    schema = EVENT_SCHEMA_V2 if v2 else EVENT_SCHEMA
    values = json_values(registry.url, topic, schema, (event_record(i, region=v2) for i in ids))
    return produce_records(broker.bootstrap, topic, ((f"k-{i}".encode(), v) for i, v in zip(ids, values, strict=True)))


def settings(registry: EmbeddedSchemaRegistry) -> tuple[str, ...]:
    return ("payload.format=json_schema", f"payload.registry.url={registry.url}")


def test_two_schema_versions_land_exactly_once_and_the_new_field_becomes_a_column(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"jsons-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    first, second = range(0, 2000), range(2000, 4000)
    old = produce_events(broker, registry, topic, first)
    new = produce_events(broker, registry, topic, second, v2=True)  # adds `region`: a second schema id
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *settings(registry))
    assert (
        payload_note(resolve_routes(cfg).main[0].payload) == f"json_schema, writer schemas from registry {registry.url}"
    )
    summary = run_ingest(spark, cfg)

    table = spark.read.format("delta").load(str(tmp_path / "t"))
    assert table.schema["region"].nullable  # the new field became a nullable column, no DDL
    expected = spark.createDataFrame(
        event_rows(old, region=False) + event_rows(new, region=True), f"{EVENT_COLUMNS}, region string"
    )
    actual = table.select(*expected.columns)
    assert actual.count() == 4000
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)  # old rows: region null
    # both schema ids were read in one micro-batch (the backlog held both when the job started)
    mixed = table.groupBy("batch_id").agg({"region": "count", "*": "count"}).collect()
    assert any(0 < r["count(region)"] < r["count(1)"] for r in mixed), mixed
    assert summary.dead_lettered == 0 and summary.released == 0
    assert nothing_left(broker, topic, group)

    # a later run, on the table the first one left: a version 1 writer still reads into it
    more = produce_events(broker, registry, topic, range(4000, 4100))
    run_ingest(spark, cfg)
    later = spark.read.format("delta").load(str(tmp_path / "t")).where("id >= 4000").select(*expected.columns)
    assert_df_equality(
        later, spark.createDataFrame(event_rows(more, region=False), f"{EVENT_COLUMNS}, region string"),
        ignore_row_order=True, ignore_nullable=True,
    )  # fmt: skip


def test_each_bad_json_schema_record_is_dead_lettered_once_with_its_class(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"jsons-bad-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    good = produce_events(broker, registry, topic, range(0, 1000))
    # a writer that turns `amount` into a string: it cannot land in the table's double column
    changed = {**EVENT_SCHEMA, "properties": {**EVENT_SCHEMA["properties"], "amount": {"type": "string"}}}
    (incompatible,) = json_values(registry.url, f"{topic}-changed", changed, [{**event_record(1), "amount": "12.50"}])
    assert good[0].value is not None
    known = good[0].value[1:5]  # the first version's schema id
    (avro,) = avro_values(registry.url, f"{topic}-avro", EVENT_AVRO_SCHEMA, [event_record(3)])
    bad_values = {
        "not_wire_format": b'{"id": 1}',  # plain JSON: no header
        "too_short": b"\x00\x00",  # not_wire_format as well
        "unknown_schema_id": b"\x00" + struct.pack(">I", 987_654) + b"{}",
        "malformed_json": b"\x00" + known + b'{"id": ',
        "not_utf8": b"\x00" + known + b'{"user": "\xff\xfe"}',  # malformed_json as well
        "schema_mismatch": b"\x00" + known + b'{"id": "not a number", "user": "u", "amount": 1, "kind": "view"}',
        "not_an_object": b"\x00" + known + b"[1, 2]",  # schema_mismatch as well
        "schema_incompatible": incompatible,
        "avro_schema_id": avro,  # schema_incompatible: an Avro schema
    }
    produce_records(broker.bootstrap, topic, ((name.encode(), v) for name, v in bad_values.items()))
    good += produce_events(broker, registry, topic, range(1000, 2000))
    cfg = ingest_config(broker, topic, group, tmp_path / "t", *settings(registry))
    summary = run_ingest(spark, cfg)

    actual = spark.read.format("delta").load(str(tmp_path / "t")).select("offset", "partition", "id")
    assert actual.count() == 2000
    assert sorted(r["id"] for r in actual.collect()) == list(range(2000))

    by_key = dead_letters_by_key(spark, resolve_routes(cfg).dead_letter.path)  # each once
    assert len(by_key) == len(bad_values)
    assert {name: by_key[name]["error_class"] for name in bad_values} == {
        "not_wire_format": "not_wire_format",
        "too_short": "not_wire_format",
        "unknown_schema_id": "unknown_schema_id",
        "malformed_json": "malformed_json",
        "not_utf8": "malformed_json",
        "schema_mismatch": "schema_mismatch",
        "not_an_object": "schema_mismatch",
        "schema_incompatible": "schema_incompatible",
        "avro_schema_id": "schema_incompatible",
    }
    message = by_key["schema_incompatible"]["error_message"]
    assert "amount" in message and "double" in message and "string" in message, message
    assert "AVRO" in by_key["avro_schema_id"]["error_message"]
    assert {r["key"].decode(): bytes(r["value"]) for r in by_key.values()} == bad_values  # the bytes as produced
    assert summary.dead_lettered == len(bad_values)
    assert nothing_left(broker, topic, group)
