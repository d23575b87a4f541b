"""Sample records for the demo, the tests and the benchmark: JSON events with distinct keys.

`produce_json_events` returns what
the broker acknowledged for each record (partition and offset from the delivery reports), so a
test can compare the Delta table with exactly what was produced; `produce_records` does the same
for any (key, value) pairs (the testing kit's, sharelake.testing.produce). `avro_values` serializes
records as users' producers do: confluent-kafka's `AvroSerializer`, registering the schema in a
schema registry under the topic's value subject (Confluent wire format).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

# what the broker acknowledged, and the producer that reports it: the testing kit's (sharelake.testing.produce)
from sharelake.testing.produce import Produced as Produced
from sharelake.testing.produce import produce_records as produce_records


def event_value(i: int) -> bytes:
    """About 100 bytes of JSON: {"id": i, "user": ..., "amount": ..., "kind": ...}."""
    return json.dumps(
        {
            "id": i,
            "user": f"user-{i % 997}",
            "amount": round((i * 7919) % 100000 / 100, 2),
            "kind": ("view", "click", "buy")[i % 3],
        },
        separators=(",", ":"),
    ).encode()


EVENT_SCHEMA = "id long, user string, amount double, kind string"  # the DDL of `event_value`

POISON_VALUES: dict[str, bytes | None] = {  # one record per way a value can fail EVENT_SCHEMA
    "malformed-json": b'{"id": 1, "user": ',
    "wrong-type": b'{"id": "seven", "user": "u", "amount": 1.5, "kind": "view"}',
    "not-an-object": b"[1, 2, 3]",
    "invalid-utf8": b'{"id": 2, "user": "\xff\xfe"}',
    "tombstone": None,
}


EVENT_AVRO_SCHEMA = json.dumps(  # `event_value`'s fields as an Avro record (the first version)
    {
        "type": "record",
        "name": "Event",
        "namespace": "sharelake.sample",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "user", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "kind", "type": "string"},
        ],
    }
)
# the second version: adds an optional field with a default (a BACKWARD-compatible change)
EVENT_AVRO_SCHEMA_V2 = json.dumps(
    {
        **json.loads(EVENT_AVRO_SCHEMA),
        "fields": [
            *json.loads(EVENT_AVRO_SCHEMA)["fields"],
            {"name": "region", "type": ["null", "string"], "default": None},
        ],
    }
)


def event_record(i: int, region: bool = False) -> dict[str, Any]:
    """`event_value(i)` as a dict (with a `region` for the second Avro version)."""
    record: dict[str, Any] = json.loads(event_value(i))
    if region:
        record["region"] = ("eu", "us", "apac")[i % 3]
    return record


def avro_values(registry_url: str, topic: str, schema: str, records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """`records` in the Confluent wire format, `schema` registered under `<topic>-value` (as users' producers do)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), schema)
    context = SerializationContext(topic, MessageField.VALUE)
    for record in records:
        value = serializer(record, context)
        assert value is not None
        yield value


def produce_poison_records(bootstrap: str, topic: str) -> list[Produced]:
    """The POISON_VALUES, keyed by their names (the demo shows them in the dead-letter table)."""
    return produce_records(bootstrap, topic, ((name.encode(), v) for name, v in POISON_VALUES.items()))


def produce_json_events(
    bootstrap: str,
    topic: str,
    count: int,
    start: int = 0,
    key_prefix: str = "k",
    client: dict[str, str] | None = None,
    rate: float | None = None,
) -> list[Produced]:
    items = ((f"{key_prefix}-{i}".encode(), event_value(i)) for i in range(start, start + count))
    return produce_records(bootstrap, topic, items, client=client, rate=rate)
