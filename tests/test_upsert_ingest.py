"""Upserts through the whole job: a real broker, several members, expired locks and a kill -9.

Every key is updated `VERSIONS` times (produced in order, keyed, so each key's records share a
partition), and every tenth key is then deleted by a tombstone. The first run's second commit is
held past the record lock (its records come back to other members while it still holds them, and
it commits them late), and the run is killed -9 a few commits later; a second run drains the rest.
The table must equal applying every record once in offset order per key: each live key at its last
version, each deleted key flagged, one row per key.

CI runs `SHARELAKE_UPSERT_KEYS=1000` (10,000 updates); the closing notes quote 10,000 keys.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from chispa import assert_df_equality
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from devkit.delta_log import read_commits
from devkit.sample_data import produce_records
from sharelake.failures.errors import ConfigError
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry
from tests.ingest_config import ingest_config
from tests.job_runner import JobSpec, drain_in_process, kill_job, run_summary, start_job
from tests.kafka_helpers import nothing_left
from tests.waiting import wait_for

KEYS = int(os.environ.get("SHARELAKE_UPSERT_KEYS", "1000"))
VERSIONS = 10
DELETED_EVERY = 10  # every tenth key ends with a tombstone


def produce_updates(bootstrap: str, topic: str) -> None:
    """`VERSIONS` rounds over the keys (version 1 of every key, then version 2, ...), then the tombstones."""
    updates = [
        (str(k).encode(), json.dumps({"id": k, "version": v, "amount": k * 100 + v}).encode())
        for v in range(1, VERSIONS + 1)
        for k in range(KEYS)
    ]
    tombstones: list[tuple[bytes, bytes | None]] = [(str(k).encode(), None) for k in range(0, KEYS, DELETED_EVERY)]
    produce_records(bootstrap, topic, [*updates, *tombstones])


def test_updates_out_of_order_with_expired_locks_and_a_kill_land_as_the_last_version_per_key(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(
        broker,
        f"upserts-{unique}",
        f"g-{unique}",
        tmp_path / "accounts",
        lock_ms=15_000,
        settings=(
            "payload.format=json",
            "payload.schema=id long, version int, amount long",
            "payload.key_format=text",
            "write.mode=upsert",
            'write.keys=["id"]',
            "write.delete_on_tombstone=true",
            "pump.members=4",
            "pump.max_poll_records=200",  # small batches: the kill comes with most of the updates still to land
            "batch.max_records=800",
        ),
    )
    broker.create_topic(spec.topic, partitions=4)
    produce_updates(broker.bootstrap, spec.topic)

    log = tmp_path / "killed.log"
    # the second commit waits past the 15 s lock: its records (and the polls waiting behind it) are
    # redelivered to other members meanwhile, and committed late; the kill comes a few commits later
    job = start_job(spec, "run.mode=continuous", faults="delay@before_delta_commit#2=17", log=log)
    try:
        wait_for(
            lambda: len(read_commits(spec.table)) >= 6, 240, give_up=lambda: job.poll() is not None,
            failure=lambda: f"the first run made no 6 commits (exit {job.poll()}):\n{log.read_text()[-3000:]}",
        )  # fmt: skip
    finally:
        kill_job(job)
    assert re.search(r"expired_locks=[1-9]", log.read_text()), "no lock expired: the scenario was not provoked"

    # the restart takes polls and batches ten times the first run's (which were small only so that the kill
    # strikes mid-backlog): the same rest to land, redeliveries and all, in a few MERGEs instead of ten
    # (CI time: 45 s of the restart's 50 s went to MERGEs of 800 records)
    restart = replace(spec, settings=(*spec.settings, "pump.max_poll_records=2000", "batch.max_records=8000"))
    assert drain_in_process(spark, restart, tmp_path / "final.log", idle_ms=8000) == 0
    final = run_summary(tmp_path / "final.log")
    print(f"upserts: {KEYS} keys x {VERSIONS} versions, {len(read_commits(spec.table))} commits; final run: {final}")

    table = spark.read.format("delta").load(str(spec.table))
    expected = spark.createDataFrame(
        [
            (k, None, None, True) if k % DELETED_EVERY == 0 else (k, VERSIONS, k * 100 + VERSIONS, False)
            for k in range(KEYS)
        ],
        "id long, version int, amount long, __deleted boolean",
    )
    landed = table.select("id", "version", "amount", "__deleted").orderBy("id")
    assert_df_equality(landed, expected.orderBy("id"), ignore_nullable=True)
    assert nothing_left(broker, spec.topic, spec.group)


ACCOUNT = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "long"},
    {"name": "owner", "type": "string"},
    {"name": "balance", "type": ["null", "long"], "default": None},
]}  # fmt: skip
ENVELOPE = json.dumps(
    {
        "type": "record",
        "name": "Envelope",
        "namespace": "bank.public.accounts",
        "fields": [
            {"name": "before", "type": ["null", ACCOUNT], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {
                "name": "source",
                "type": {
                    "type": "record",
                    "name": "Source",
                    "fields": [
                        {"name": "connector", "type": "string"},
                        {"name": "lsn", "type": ["null", "long"], "default": None},
                    ],
                },
            },
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }
)  # fmt: skip: Debezium's Postgres envelope, trimmed
KEY_SCHEMA = json.dumps({"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]})


def test_debezium_avro_events_insert_update_and_delete(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    """A table's snapshot (`r`), inserts, updates and deletes with their tombstones, as Debezium's
    Avro converter writes them: values and keys in the registry, the table's rows from `after`."""
    topic, group = f"cdc-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    client = SchemaRegistryClient({"url": registry.url})
    values = AvroSerializer(client, ENVELOPE)
    keys = AvroSerializer(client, KEY_SCHEMA)

    def change(i: int, op: str, balance: int | None) -> tuple[bytes, bytes | None]:
        row = {"id": i, "owner": f"owner-{i}", "balance": balance}
        before, after = (row, None) if op == "d" else (None, row)
        event = {"before": before, "after": after, "source": {"connector": "postgresql", "lsn": i}, "op": op}
        key = keys({"id": i}, SerializationContext(topic, MessageField.KEY))
        assert key is not None
        return key, values(event, SerializationContext(topic, MessageField.VALUE))

    changes = [change(i, "r", i) for i in range(100)]
    changes += [change(i, "u", i * 10) for i in range(0, 100, 2)]
    for i in range(0, 100, 10):
        key, delete = change(i, "d", None)
        changes += [(key, delete), (key, None)]  # the delete, then its tombstone
    changes += [change(i, "c", i) for i in range(100, 110)]
    produce_records(broker.bootstrap, topic, changes)

    registry_url = f"payload.registry.url={registry.url}"
    avro = ("payload.format=avro", "payload.key_format=avro", "payload.envelope=debezium", registry_url)
    sets = (*avro, "write.mode=upsert", 'write.keys=["id"]')
    summary = run_ingest(spark, ingest_config(broker, topic, group, tmp_path / "accounts", *sets))

    def expected(i: int) -> tuple[int, str | None, int | None, bool]:
        if i < 100 and i % 10 == 0:
            return (i, None, None, True)
        return (i, f"owner-{i}", i * 10 if i < 100 and i % 2 == 0 else i, False)

    landed = spark.read.format("delta").load(str(tmp_path / "accounts"))
    assert_df_equality(
        landed.select("id", "owner", "balance", "__deleted").orderBy("id"),
        spark.createDataFrame(
            [expected(i) for i in range(110)], "id long, owner string, balance long, __deleted boolean"
        ),
        ignore_nullable=True,
    )
    assert summary.dead_lettered == 0
    assert nothing_left(broker, topic, group)


def test_a_key_the_writer_schemas_lack_stops_the_job_at_its_first_batch(
    broker: EmbeddedKafka, registry: EmbeddedSchemaRegistry, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    """Avro's columns are known from the registry once records arrive: a key column they lack is
    found by the first batch, which stops the job with the config's one line (exit 2), not retried."""
    topic, group = f"cdc-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=1)
    values = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(ACCOUNT))
    value = values({"id": 1, "owner": "ann", "balance": 1}, SerializationContext(topic, MessageField.VALUE))
    produce_records(broker.bootstrap, topic, [(b"1", value)])
    sets = (
        "payload.format=avro",
        f"payload.registry.url={registry.url}",
        "write.mode=upsert",
        'write.keys=["account"]',
    )
    with pytest.raises(ConfigError) as stopped:
        run_ingest(spark, ingest_config(broker, topic, group, tmp_path / "accounts", *sets))
    assert str(stopped.value).startswith("write.keys names account, not a column of the table (topic, partition")
    assert "id, owner, balance" in str(stopped.value)
