"""The benchmark workload's Avro twin: the same records as `devkit.workload`, in the Confluent wire format.

`AVRO_SCHEMA` has the fields of `SCHEMA_DDL` with the same types (id long, user string, ts string,
amount double, kind string, tags array<string>, note string); `AVRO_SCHEMA_JSON` is that writer
schema as JSON, the one a Spark job decodes with. Record i is `devkit.workload.record_value(i)` parsed
back, so every field value is the same as in the JSON topic (the `note` keeps its padding; an Avro
value is shorter, it carries no field names). The schema is registered once under `<topic>-value`,
as a producer's serializer would, and each body is written with fastavro behind the 5-byte header
(magic byte 0, the schema id big-endian): the bytes confluent-kafka's AvroSerializer writes, without
its per-record cost.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from devkit.workload import ProduceStats, produce_backlog, record_value

AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "bench_record",
    "namespace": "sharelake.bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "ts", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "kind", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": "string"},
    ],
}
AVRO_SCHEMA_JSON = json.dumps(AVRO_SCHEMA, separators=(",", ":"))
MAGIC = 0
HEADER_BYTES = 5


def register_schema(registry_url: str, topic: str) -> int:
    """Register AVRO_SCHEMA under `<topic>-value` (TopicNameStrategy) and return its schema id."""
    client = SchemaRegistryClient({"url": registry_url})
    return int(client.register_schema(f"{topic}-value", Schema(AVRO_SCHEMA_JSON, "AVRO")))


def avro_value_of(schema_id: int) -> Callable[[int], bytes]:
    """i -> record i's value in the wire format: header + the Avro body of `record_value(i)`'s fields."""
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    header = bytes([MAGIC]) + schema_id.to_bytes(4, "big")

    def value(i: int) -> bytes:
        out = io.BytesIO()
        out.write(header)
        fastavro.schemaless_writer(out, parsed, json.loads(record_value(i)))
        return out.getvalue()

    return value


def produce_avro_backlog(
    bootstrap: str, registry_url: str, topic: str, count: int, batch_bytes: int = 16384
) -> tuple[ProduceStats, int]:
    """Register the schema, then produce records 0..count-1 as Avro (keys as the JSON topic's);
    the produce stats and the schema id."""
    schema_id = register_schema(registry_url, topic)
    stats = produce_backlog(bootstrap, topic, count, batch_bytes, value_of=avro_value_of(schema_id))
    return stats, schema_id
