"""One batch's decode, Protobuf against Avro: `python -m bench format-decode [records] [rounds]`.

Not a phase of `bench.run` (run it on its own; it needs no broker). It starts an embedded schema
registry and a local SparkSession, serializes the same N events (the sample's fields: id, user,
amount, kind) with confluent-kafka's AvroSerializer and ProtobufSerializer, and then, per format, runs
what the Delta sink runs for one batch: the format's `read` on the driver (headers, schema ids from
the registry), the Spark parse and the main table's columns, written to Spark's `noop` sink (so
Delta's write is left out and only the decode path is compared). One untimed run per format first
(the registry fetch, code generation, the Python workers), then the rounds, the formats alternating
within each round. Prints each format's rows and records/s (median over the rounds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from pyspark.sql import SparkSession

from devkit.sample_data import EVENT_AVRO_SCHEMA, avro_values, event_record
from sharelake.formats.avro import AvroFormat, AvroSettings
from sharelake.formats.base import PayloadFormat, RegistrySettings
from sharelake.formats.protobuf import ProtobufFormat, ProtobufSettings
from sharelake.run.spark_session import build_spark
from sharelake.table.columns import ROW_SCHEMA
from sharelake.table.location import TableLocation
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry

HELP = "one batch's decode, Protobuf against Avro, on a local SparkSession and an embedded registry (no broker)"


def event_class() -> type[Message]:
    """The sample event as a Protobuf message (the fields of EVENT_AVRO_SCHEMA)."""
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="bench/event.proto", package="sharelake.sample", syntax="proto3")
    message = file.message_type.add(name="Event")
    kinds = [("id", field.TYPE_INT64), ("user", field.TYPE_STRING), ("amount", field.TYPE_DOUBLE)]
    for number, (name, kind) in enumerate([*kinds, ("kind", field.TYPE_STRING)], 1):
        message.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    cls: type[Message] = message_factory.GetMessageClass(pool.FindMessageTypeByName("sharelake.sample.Event"))
    return cls


def protobuf_values(registry_url: str, topic: str, n: int) -> list[bytes]:
    cls = event_class()
    serializer = ProtobufSerializer(cls, SchemaRegistryClient({"url": registry_url}))
    context = SerializationContext(topic, MessageField.VALUE)
    return [serializer(cls(**event_record(i)), context) for i in range(n)]


def rows_of(values: list[bytes], topic: str) -> pa.Table:
    """One batch's rows, as the sink holds them (ROW_SCHEMA)."""
    n = len(values)
    now = datetime.now(UTC)
    columns = {
        "topic": pa.array([topic] * n),
        "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "key": pa.nulls(n, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.nulls(n, ROW_SCHEMA.field("headers").type),
        "kafka_timestamp": pa.array([now] * n, pa.timestamp("ms", tz="UTC")),
        "delivery_count": pa.array([1] * n, pa.int32()),
        "ingested_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        "batch_id": pa.array([0] * n, pa.int64()),
    }
    return pa.table(columns, schema=ROW_SCHEMA)


def one_batch(spark: SparkSession, reader: PayloadFormat, rows: pa.Table) -> tuple[float, float]:
    """(seconds of the driver's read, seconds in all) for one batch through `reader`."""
    start = time.perf_counter()
    bad, read = reader.read(rows)
    driver = time.perf_counter() - start
    assert not bad, bad[:3]
    frame = spark.createDataFrame(rows)
    read.main_rows(read.parse(frame)).write.format("noop").mode("overwrite").save()
    return driver, time.perf_counter() - start


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("records", type=int, nargs="?", default=100_000, help="events in the batch (default 100,000)")
    p.add_argument("rounds", type=int, nargs="?", default=3, help="timed rounds of each format (default 3)")


def settings(args: argparse.Namespace) -> tuple[int, int]:
    """(events in the batch, rounds)."""
    return args.records, args.rounds


def run(args: argparse.Namespace) -> int:
    n, rounds = settings(args)
    with tempfile.TemporaryDirectory(prefix="sharelake-decode-") as tmp:
        registry = EmbeddedSchemaRegistry(Path(tmp) / "registry").start()
        try:
            spark = build_spark("format-decode", "local[2]")
            registry_settings = RegistrySettings(url=registry.url)
            batches = {
                "avro": rows_of(
                    list(avro_values(registry.url, "bench-avro", EVENT_AVRO_SCHEMA, map(event_record, range(n)))),
                    "bench-avro",
                ),
                "protobuf": rows_of(protobuf_values(registry.url, "bench-protobuf", n), "bench-protobuf"),
            }
            readers: dict[str, PayloadFormat] = {
                "avro": AvroFormat(AvroSettings(registry=registry_settings)),
                "protobuf": ProtobufFormat(ProtobufSettings(registry=registry_settings)),
            }
            for name, reader in readers.items():
                reader.start(spark, TableLocation.at(Path(tmp) / f"table-{name}"))
                one_batch(spark, reader, batches[name])  # untimed
            timings: dict[str, list[tuple[float, float]]] = {name: [] for name in readers}
            for _ in range(rounds):
                for name, reader in readers.items():
                    timings[name].append(one_batch(spark, reader, batches[name]))
            for name, runs in timings.items():
                total = statistics.median(t for _, t in runs)
                driver = statistics.median(d for d, _ in runs)
                print(
                    f"{name:9s} {n:,} records: {n / total:,.0f} records/s "
                    f"(median of {rounds}: {total:.2f} s, of which the driver's read {driver * 1000:.0f} ms)"
                )
            spark.stop()
        finally:
            registry.stop()
    return 0
