"""Record keys per topic: text keys and registry-encoded Avro keys, real broker, registry and Delta.

One job, two routed topics: JSON values with text keys, and Avro values with Avro keys whose schema
gains a field half-way (a second key schema id). What a user checks: the `key` column holds the
text, or a struct of the key's fields (the new field null for the older keys); a null key stays
null; a key that cannot be read is dead-lettered once with its `key_` class; a table whose keys were
written in one format refuses another at start; nothing is left to deliver (a sentinel proves it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from devkit.sample_data import (
    EVENT_AVRO_SCHEMA,
    EVENT_SCHEMA,
    avro_values,
    event_record,
    event_value,
    produce_records,
)
from sharelake.config.loader import load_config
from sharelake.config.settings import SharelakeConfig
from sharelake.failures.errors import ConfigError
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry
from tests.kafka_helpers import nothing_left

KEY_SCHEMA = {
    "type": "record",
    "name": "EventKey",
    "namespace": "sharelake.sample",
    "fields": [{"name": "customer", "type": "string"}],
}
KEY_SCHEMA_V2 = {
    **KEY_SCHEMA,
    "fields": [*KEY_SCHEMA["fields"], {"name": "shard", "type": ["null", "int"], "default": None}],
}


def avro_keys(registry_url: str, topic: str, schema: dict[str, Any], keys: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """`keys` in the Confluent wire format, `schema` registered under `<topic>-key` (as producers do)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.KEY)
    for key in keys:
        data = serializer(key, context)
        assert data is not None
        yield data


def routed(broker: EmbeddedKafka, group: str, tables: dict[str, Path], dead: Path, *extra: str) -> SharelakeConfig:
    names = ", ".join(f'"{t}"' for t in tables)
    return load_config(
        None,
        [
            f"kafka.bootstrap_servers={broker.bootstrap}",
            f"kafka.topics=[{names}]",
            f"kafka.group_id={group}",
            f"dead_letter.table_path={dead}",
            *(f"topics.{t}.table_path={p}" for t, p in tables.items()),
            "run.mode=until-drained",
            "run.idle_timeout_ms=6000",
            *extra,
        ],
    )


def test_text_and_avro_keys_land_per_topic_and_bad_keys_are_dead_lettered(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    text_topic, avro_topic = f"keys-text-{unique}", f"keys-avro-{unique}"
    for topic in (text_topic, avro_topic):
        broker.create_topic(topic, partitions=2)
    ids = range(1000)
    texts = produce_records(broker.bootstrap, text_topic, [(f"k-{i}".encode(), event_value(i)) for i in ids])
    texts += produce_records(broker.bootstrap, text_topic, [(None, event_value(1000))])  # a null key (b"" here)
    first, second = range(0, 500), range(500, 1000)  # the key schema gains `shard` half-way: a second id
    keys = [
        *avro_keys(registry.url, avro_topic, KEY_SCHEMA, ({"customer": f"c-{i}"} for i in first)),
        *avro_keys(registry.url, avro_topic, KEY_SCHEMA_V2, ({"customer": f"c-{i}", "shard": i % 7} for i in second)),
    ]
    values = list(avro_values(registry.url, avro_topic, EVENT_AVRO_SCHEMA, (event_record(i) for i in ids)))
    avros = produce_records(broker.bootstrap, avro_topic, zip(keys, values, strict=True))
    bad = {
        text_topic: produce_records(broker.bootstrap, text_topic, [(b"\xff\xfe", event_value(2000))]),
        avro_topic: produce_records(
            broker.bootstrap,
            avro_topic,
            [
                (b"\x01not avro", values[0]),  # key_not_wire_format
                (b"\x00" + (999_999).to_bytes(4, "big") + b"\x02", values[1]),  # key_unknown_schema_id
                (keys[0][:5] + b"\x99", values[2]),  # a registered key id, a body cut short: key_decode_failed
            ],
        ),
    }

    tables = {text_topic: tmp_path / "text_keys", avro_topic: tmp_path / "avro_keys"}
    cfg = routed(
        broker,
        f"g-{unique}",
        tables,
        tmp_path / "dead_letter",
        "payload.format=json",  # the default section: what the topics share
        f"payload.schema={EVENT_SCHEMA}",
        "payload.key_format=text",
        f"topics.{avro_topic}.payload.format=avro",
        f"topics.{avro_topic}.payload.key_format=avro",
        f"topics.{avro_topic}.payload.registry.url={registry.url}",
    )
    summary = run_ingest(spark, cfg)

    text_table = spark.read.format("delta").load(str(tables[text_topic]))
    assert text_table.schema["key"].dataType.simpleString() == "string"
    expected = spark.createDataFrame(
        [(p.partition, p.offset, p.key.decode() or None, json.loads(p.value or b"")["id"]) for p in texts],
        "partition int, offset long, key string, id long",
    )
    assert_df_equality(text_table.select(*expected.columns), expected, ignore_row_order=True, ignore_nullable=True)

    avro_table = spark.read.format("delta").load(str(tables[avro_topic]))
    assert avro_table.schema["key"].dataType.simpleString() == "struct<customer:string,shard:int>"
    index = {key: i for i, key in enumerate(keys)}  # each key is distinct: it names its record
    expected = spark.createDataFrame(
        [
            (
                p.partition,
                p.offset,
                f"c-{index[p.key]}",
                index[p.key] % 7 if index[p.key] >= 500 else None,
                index[p.key],
            )
            for p in avros
        ],
        "partition int, offset long, customer string, shard int, id long",
    )
    actual = avro_table.select("partition", "offset", "key.customer", "key.shard", "id")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)  # older keys: shard null

    parked = spark.read.format("delta").load(str(tmp_path / "dead_letter")).collect()
    got = sorted((r["topic"], r["offset"], r["error_class"]) for r in parked)
    classes = {
        b"\xff\xfe": "key_invalid_utf8",
        b"\x01not avro": "key_not_wire_format",
        keys[0][:5] + b"\x99": "key_decode_failed",
    }
    classes[b"\x00" + (999_999).to_bytes(4, "big") + b"\x02"] = "key_unknown_schema_id"
    want = sorted((r.topic, r.offset, classes[r.key]) for records in bad.values() for r in records)
    assert got == want
    assert summary.dead_lettered == 4 and summary.released == 0
    for topic in tables:
        assert nothing_left(broker, topic, f"g-{unique}"), topic

    # the text table's keys are strings: reading them as Avro is refused at start, naming the fix
    with pytest.raises(ConfigError, match=r"payload.key_format = 'avro', but the table .* holds keys as string"):
        run_ingest(
            spark,
            routed(
                broker,
                f"g-{unique}",
                {text_topic: tables[text_topic]},
                tmp_path / "dead_letter",
                "payload.format=json",
                f"payload.schema={EVENT_SCHEMA}",
                "payload.key_format=avro",
                f"payload.registry.url={registry.url}",
            ),
        )
