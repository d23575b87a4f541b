"""Protobuf in the Confluent wire format, end to end: real broker, real schema registry, real Delta.

Records are produced as users' producers do: confluent-kafka's ProtobufSerializer against the
embedded Apicurio registry (which registers the file as a base64 descriptor), and one schema
registered as `.proto` text, as Java's serializer does. What a user checks: the table holds exactly
the good records, decoded into columns (a repeated field, a well-known Timestamp, a message that is
not the file's first); a second version of the message adds its column and the older rows read null;
each kind of bad record is in the dead-letter table once with its class; a registry that does not
answer is an outage (the batch is retried), never the records' fault.
"""

from __future__ import annotations

import json
import struct
import urllib.request
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from google.protobuf.message import Message
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type

from devkit.sample_data import produce_records
from sharelake.config.routes import resolve_routes
from sharelake.failures.errors import DependencyUnavailable
from sharelake.formats.base import PARSED, RegistrySettings
from sharelake.formats.protobuf import ProtobufFormat, ProtobufSettings, spark_type
from sharelake.formats.protobuf_decode import DecodePlan, Writer, decode_values
from sharelake.formats.protobuf_schemas import message_at, writer_schema
from sharelake.formats.shape import Shape
from sharelake.run.pipeline import run_ingest
from sharelake.table.location import TableLocation
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry
from tests.ingest_config import ingest_config
from tests.kafka_helpers import nothing_left
from tests.table_checks import dead_letters_by_key

FIELD = descriptor_pb2.FieldDescriptorProto
BASE_TIME = 1_700_000_000
# the same message as .proto text (Java's serializer registers text; Apicurio serves it as registered)
EVENT_PROTO_TEXT = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Event {
  int64 id = 1;
  string user = 2;
  double amount = 3;
  string kind = 4;
  google.protobuf.Timestamp at = 5;
  repeated string tags = 6;
}
"""


def event_class(version: int, amount_type: int = FIELD.TYPE_DOUBLE) -> type[Message]:
    """shop.Event, the second message of its file (message indexes [1]); version 2 adds `region`."""
    file = descriptor_pb2.FileDescriptorProto(name="shop/event.proto", package="shop", syntax="proto3")
    file.dependency.append("google/protobuf/timestamp.proto")
    header = file.message_type.add(name="Header")
    header.field.add(name="source", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    event = file.message_type.add(name="Event")
    optional, repeated = FIELD.LABEL_OPTIONAL, FIELD.LABEL_REPEATED
    event.field.add(name="id", number=1, type=FIELD.TYPE_INT64, label=optional)
    event.field.add(name="user", number=2, type=FIELD.TYPE_STRING, label=optional)
    event.field.add(name="amount", number=3, type=amount_type, label=optional)
    event.field.add(name="kind", number=4, type=FIELD.TYPE_STRING, label=optional)
    timestamp = ".google.protobuf.Timestamp"
    event.field.add(name="at", number=5, type=FIELD.TYPE_MESSAGE, type_name=timestamp, label=optional)
    event.field.add(name="tags", number=6, type=FIELD.TYPE_STRING, label=repeated)
    if version == 2:
        event.field.add(name="region", number=7, type=FIELD.TYPE_STRING, label=optional)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    cls: type[Message] = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Event"))
    return cls


def event(cls: type[Message], i: int) -> Message:
    fields: dict[str, Any] = {"id": i, "user": f"u{i % 7}", "amount": i * 0.5, "kind": ("buy", "view")[i % 2]}
    fields |= {"at": datetime.fromtimestamp(BASE_TIME + i, UTC), "tags": [f"t{i % 3}", "x"][: 1 + i % 2]}
    if "region" in cls.DESCRIPTOR.fields_by_name:
        fields["region"] = f"r{i % 4}"
    return cls(**fields)


def serialized(registry: EmbeddedSchemaRegistry, subject_topic: str, messages: Iterable[Message]) -> list[bytes]:
    items = list(messages)
    serializer = ProtobufSerializer(type(items[0]), SchemaRegistryClient({"url": registry.url}))
    context = SerializationContext(subject_topic, MessageField.VALUE)
    return [serializer(m, context) for m in items]


def register_text(registry: EmbeddedSchemaRegistry, subject: str, text: str) -> int:
    body = json.dumps({"schemaType": "PROTOBUF", "schema": text}).encode()
    request = urllib.request.Request(
        f"{registry.url}/subjects/{subject}/versions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(json.load(answer)["id"])


def keyed(prefix: str, ids: range, values: list[bytes]) -> Iterable[tuple[bytes, bytes]]:
    return ((f"{prefix}-{i}".encode(), v) for i, v in zip(ids, values, strict=True))


def test_protobuf_versions_and_bad_records_land_exactly_once_each_where_it_belongs(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group = f"proto-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    v1, v2 = event_class(1), event_class(2)
    first, second, third = range(0, 1500), range(1500, 3000), range(3000, 3200)
    good = produce_records(
        broker.bootstrap, topic, keyed("k", first, serialized(registry, topic, (event(v1, i) for i in first)))
    )
    good += produce_records(
        broker.bootstrap, topic, keyed("k", second, serialized(registry, topic, (event(v2, i) for i in second)))
    )
    # the same message registered as .proto text, its values hand-framed with indexes [0] (the single byte 0)
    text_id = register_text(registry, f"{topic}-text", EVENT_PROTO_TEXT)
    text_values = [b"\x00" + struct.pack(">I", text_id) + b"\x00" + event(v1, i).SerializeToString() for i in third]
    good += produce_records(broker.bootstrap, topic, keyed("k", third, text_values))

    (known,) = serialized(registry, topic, [event(v1, 1)])
    known_id = known[1:5]
    (incompatible,) = serialized(registry, f"{topic}-changed", [event_class(1, FIELD.TYPE_STRING)(amount="12.50")])
    bad_values = {
        "not_wire_format": b"\x01\x00\x00\x00\x01abc",  # magic byte 1
        "too_short": b"\x00\x00",  # not_wire_format as well
        "unknown_schema_id": b"\x00" + struct.pack(">I", 987_654) + b"\x00\x08\x01",
        "cut_indexes": b"\x00" + known_id + b"\x02",  # one index announced, none follows
        "no_such_message": b"\x00" + known_id + b"\x02\x08\x08\x01",  # indexes [4]: the file has two messages
        "protobuf_decode_failed": b"\x00" + known_id + b"\x02\x02\x12\x09abc",  # a string cut short
        "schema_incompatible": incompatible,  # `amount` a string: the table's column is a double
    }
    bad = produce_records(broker.bootstrap, topic, ((name.encode(), v) for name, v in bad_values.items()))
    cfg = ingest_config(
        broker, topic, group, tmp_path / "t", "payload.format=protobuf", f"payload.registry.url={registry.url}"
    )
    summary = run_ingest(spark, cfg)

    table = spark.read.format("delta").load(str(tmp_path / "t"))
    assert table.schema["region"].nullable  # the new field became a nullable column, no DDL
    assert {"id", "user", "amount", "kind", "at", "tags", "region"} <= set(table.columns)
    rows = table.select(
        "partition",
        "offset",
        "key",
        "id",
        "user",
        "amount",
        "kind",
        F.col("at").cast("long").alias("at"),
        "tags",
        "region",
    ).collect()
    assert len(rows) == 3200
    assert {(r["partition"], r["offset"]) for r in rows} == {(p.partition, p.offset) for p in good}  # once each
    for r in rows:
        i = r["id"]
        assert r["key"] == f"k-{i}".encode()
        assert (r["user"], r["amount"], r["kind"]) == (f"u{i % 7}", i * 0.5, ("buy", "view")[i % 2])
        assert r["at"] == BASE_TIME + i and r["tags"] == [f"t{i % 3}", "x"][: 1 + i % 2]
        assert r["region"] == (f"r{i % 4}" if i in second else None)  # version 1 and the text schema: null
    assert sorted(r["id"] for r in rows) == list(range(3200))

    by_key = dead_letters_by_key(spark, resolve_routes(cfg).dead_letter.path)  # each once
    assert len(by_key) == len(bad_values)
    assert {name: by_key[name]["error_class"] for name in bad_values} == {
        "not_wire_format": "not_wire_format",
        "too_short": "not_wire_format",
        "unknown_schema_id": "unknown_schema_id",
        "cut_indexes": "bad_message_index",
        "no_such_message": "bad_message_index",
        "protobuf_decode_failed": "protobuf_decode_failed",
        "schema_incompatible": "schema_incompatible",
    }
    message = by_key["schema_incompatible"]["error_message"]
    assert "amount" in message and "double" in message and "string" in message, message
    assert "shop.Event" in by_key["protobuf_decode_failed"]["error_message"]
    assert {r["key"].decode(): bytes(r["value"]) for r in by_key.values()} == bad_values  # the raw value, as produced
    assert {(p.partition, p.offset) for p in bad} == {(r["partition"], r["offset"]) for r in by_key.values()}
    assert summary.dead_lettered == len(bad_values) and summary.released == 0
    assert nothing_left(broker, topic, group)


def test_protobuf_types_land_as_spark_types_and_an_empty_body_reads_as_the_defaults() -> None:
    """Enums by name, uint64 as decimal(20,0), maps, nested messages; no registry or Spark job needed."""
    file = descriptor_pb2.FileDescriptorProto(name="types.proto", package="types", syntax="proto3")
    color = file.enum_type.add(name="Color")
    color.value.add(name="RED", number=0)
    color.value.add(name="BLUE", number=1)
    inner = file.message_type.add(name="Inner")
    inner.field.add(name="q", number=1, type=FIELD.TYPE_INT32, label=FIELD.LABEL_OPTIONAL)
    message = file.message_type.add(name="M")
    message.field.add(name="c", number=1, type=FIELD.TYPE_ENUM, type_name=".types.Color", label=FIELD.LABEL_OPTIONAL)
    message.field.add(name="big", number=2, type=FIELD.TYPE_UINT64, label=FIELD.LABEL_OPTIONAL)
    entry = message.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=FIELD.TYPE_INT32, label=FIELD.LABEL_OPTIONAL)
    attrs = ".types.M.AttrsEntry"
    message.field.add(name="attrs", number=3, type=FIELD.TYPE_MESSAGE, type_name=attrs, label=FIELD.LABEL_REPEATED)
    message.field.add(
        name="inner", number=4, type=FIELD.TYPE_MESSAGE, type_name=".types.Inner", label=FIELD.LABEL_OPTIONAL
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("types.M"))
    writer = Writer((file.SerializeToString(),), "types.M")
    assert message_at(writer.files, (1,)) == "types.M"  # indexes [1]: the file's second message
    shape = Shape({})
    columns = [(column.name, column.type) for column in writer_schema(writer)]
    assert shape.admit(f"{writer.name} (schema id 7)", columns, spark_type) is None
    assert shape.spark_type().simpleString() == (
        "struct<c:string,big:decimal(20,0),attrs:map<string,int>,inner:struct<q:int>>"
    )
    full = cls(c=1, big=2**64 - 1, attrs={"a": 1}, inner={"q": 5})
    header = b"\x00" + struct.pack(">I", 7) + b"\x02\x02"  # schema id 7, indexes [1]
    values = pa.array([header + full.SerializeToString(), header], pa.binary())
    plan = DecodePlan({(7, (1,)): writer}, to_arrow_type(shape.spark_type(), timezone="UTC"))
    decoded = decode_values(plan, values).field(PARSED).to_pylist()
    assert decoded == [
        {"c": "BLUE", "big": Decimal(2**64 - 1), "attrs": [("a", 1)], "inner": {"q": 5}},
        {"c": "RED", "big": Decimal(0), "attrs": [], "inner": None},  # proto3: unset scalars read as defaults
    ]


def test_a_registry_that_does_not_answer_is_an_outage_not_the_records_fault(
    registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    (value,) = serialized(registry, f"proto-outage-{unique}", [event(event_class(1), 1)])
    settings = ProtobufSettings(registry=RegistrySettings(url=registry.url, timeout_s=1))
    reader = ProtobufFormat(settings)
    reader.start(spark, TableLocation.at(tmp_path / "t"))  # the job's start-up: the registry answers
    rows = pa.table({"value": pa.array([value], pa.binary())})
    registry.pause()  # then hangs: every request times out
    try:
        with pytest.raises(DependencyUnavailable, match="did not answer within"):
            reader.read(rows)  # the sink RELEASEs the batch on this: nothing dead-lettered
        with pytest.raises(DependencyUnavailable):
            reader.probe()
    finally:
        registry.resume()
    reader.probe()  # answers again
    bad, _ = reader.read(rows)  # the id is fetched now: the record is readable
    assert bad == []
