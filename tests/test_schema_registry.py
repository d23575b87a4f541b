"""The embedded schema registry, through the client the project uses: confluent-kafka's.

A real Apicurio Registry (the session's `registry`) behind its Confluent-compatible API: the Avro
serializer registers two versions of a subject, the client reads each back by id, an unknown id is
a 404, and a frozen registry makes the client time out, then serves the same schemas once it runs
again. No fakes; every lookup that matters goes over HTTP (a fresh client has no cache).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx2
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from sharelake.testing.kafka_broker import free_port
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry, runner_jar

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "dev.sharelake.test",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
# v2 adds an optional field with a default: a backward-compatible change, so the registry takes it
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


def schema_id(framed: bytes) -> int:
    """The schema id of a Confluent-framed record: magic byte 0, then the id as 4 big-endian bytes."""
    assert framed[0] == 0, framed[:5]
    return int.from_bytes(framed[1:5], "big")


def parsed(schema: Schema) -> object:
    """A schema's text as JSON, to compare with what was registered whatever the spacing."""
    assert schema.schema_str is not None
    return json.loads(schema.schema_str)


def test_serializer_registers_two_versions_and_the_client_reads_them_back(
    registry: EmbeddedSchemaRegistry, unique: str
) -> None:
    topic = f"orders-{unique}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    writer = SchemaRegistryClient({"url": registry.url})
    v1 = AvroSerializer(writer, json.dumps(ORDER_V1))({"id": 1, "amount": 9.5}, ctx)
    v2 = AvroSerializer(writer, json.dumps(ORDER_V2))({"id": 2, "amount": 1.0, "note": "gift"}, ctx)
    id1, id2 = schema_id(v1), schema_id(v2)
    assert id1 != id2

    reader = SchemaRegistryClient({"url": registry.url})  # its own cache is empty: real requests
    assert parsed(reader.get_schema(id1)) == ORDER_V1
    assert parsed(reader.get_schema(id2)) == ORDER_V2
    assert reader.get_versions(f"{topic}-value") == [1, 2]
    assert reader.get_latest_version(f"{topic}-value").schema_id == id2


def test_unknown_schema_id_is_a_404(registry: EmbeddedSchemaRegistry) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    with pytest.raises(SchemaRegistryError) as raised:
        client.get_schema(2**31 - 1)  # the largest id the wire format holds: never handed out here
    assert raised.value.http_status_code == 404
    assert raised.value.error_code == 40403  # Confluent's "schema not found"


def test_paused_registry_times_out_then_serves_the_schema_again(registry: EmbeddedSchemaRegistry, unique: str) -> None:
    writer = SchemaRegistryClient({"url": registry.url})
    sid = writer.register_schema(f"paused-{unique}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    # a short timeout and no retries: one request, failing after 1 s instead of ~10 s of retries
    client = SchemaRegistryClient({"url": registry.url, "timeout": 1, "max.retries": 0})

    registry.pause()
    try:
        begun = time.monotonic()
        # the kernel still accepts the connection of a frozen JVM: the answer is what never comes
        with pytest.raises(httpx2.ReadTimeout):
            client.get_schema(sid)
        assert time.monotonic() - begun < 10
    finally:
        registry.resume()

    assert parsed(client.get_schema(sid)) == ORDER_V1


def test_registry_that_is_down_refuses_the_connection() -> None:
    client = SchemaRegistryClient({"url": f"http://127.0.0.1:{free_port()}/apis/ccompat/v7", "max.retries": 0})
    with pytest.raises(httpx2.ConnectError):
        client.get_subjects()


def test_missing_distribution_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run `make jars`"):
        runner_jar(tmp_path)
