"""The demo: embedded Kafka broker and schema registry -> JSON and Avro records -> one ingest job -> three tables.

    make demo        (sets everything up first; or: .cache/venv/bin/python -m devkit.demo [--records N] [--work-dir D])

Starts a fresh single-node broker and an embedded schema registry (Apicurio) under .cache/demo/
(or `--work-dir`: two demos with different ones never collide),
creates three 3-partition topics and produces to them: sample JSON events with a few poison records
in the middle; the same events as Avro through the registry (confluent-kafka's AvroSerializer),
the second half with a new version of the schema that adds an optional field, and two poison
records; and the JSON events again, keyed by their `user`, into a table upserted by `user` (one row
per user, the newest amount: `docs/upserts.md`). Then one `./spark-submit.sh jobs/main.py
ingest` (what users submit) reads the topics in until-drained mode, each routed into its own table,
with `--summary` (each table, its columns, and the dead letters by class), and the broker and
registry stop. Then it proves its own result with a Spark session of its own
(`devkit.demo_check`): every produced record in its table exactly once, one row per user at its
newest amount, every poison record in the dead-letter table once with its class. Exits with the
ingest job's exit code, or 1 when the check fails. In a terminal the job's output scrolls above one
progress bar; piped or redirected there is no bar, only the job's lines (`sharelake.observe.console.follow_job`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from devkit.demo_check import Expected, ExpectedUpserts, check_demo
from devkit.paths import CACHE_DIR, jars_env
from devkit.paths import PROJECT_ROOT as ROOT
from devkit.sample_data import (
    EVENT_AVRO_SCHEMA,
    EVENT_AVRO_SCHEMA_V2,
    EVENT_SCHEMA,
    Produced,
    avro_values,
    event_record,
    event_value,
    produce_json_events,
    produce_poison_records,
    produce_records,
)
from sharelake.observe.console import follow_job
from sharelake.run.spark_session import build_spark
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry

TOPIC = "demo-events"
AVRO_TOPIC = "demo-avro-events"
USERS_TOPIC = "demo-users"  # the JSON events keyed by user, upserted by user
AVRO_POISON: dict[str, bytes] = {  # one per way an Avro value can fail before its body is read
    "not-wire-format": b"plain text, no Confluent header",
    "unknown-schema-id": b"\x00\x00\x0f\x42\x40\x02",  # schema id 1,000,000: not in the registry
}
# the dead-letter class each poison record must land with (by its key): what the demo proves at the end
POISON_CLASSES = {
    "malformed-json": "malformed_json",
    "wrong-type": "schema_mismatch",
    "not-an-object": "schema_mismatch",
    "invalid-utf8": "invalid_utf8",
    "tombstone": "null_value",
    "not-wire-format": "not_wire_format",
    "unknown-schema-id": "unknown_schema_id",
}


def produce_avro_events(registry_url: str, bootstrap: str, count: int) -> tuple[list[Produced], list[Produced]]:
    """`count` Avro events, the second half with the schema's second version (a new optional field),
    and the poison records between them."""
    half = count // 2
    first = avro_values(registry_url, AVRO_TOPIC, EVENT_AVRO_SCHEMA, (event_record(i) for i in range(half)))
    good = produce_records(bootstrap, AVRO_TOPIC, ((f"a-{i}".encode(), v) for i, v in enumerate(first)))
    poison = produce_records(bootstrap, AVRO_TOPIC, ((k.encode(), v) for k, v in AVRO_POISON.items()))
    records = (event_record(i, region=True) for i in range(half, count))
    second = avro_values(registry_url, AVRO_TOPIC, EVENT_AVRO_SCHEMA_V2, records)
    keyed = ((f"a-{i}".encode(), v) for i, v in zip(range(half, count), second, strict=True))
    good += produce_records(bootstrap, AVRO_TOPIC, keyed)
    return good, poison


def produce_user_events(bootstrap: str, count: int) -> ExpectedUpserts:
    """`count` JSON events keyed by their user (so each user's share a partition, in order); what the
    upserted table must hold: each user's newest amount."""
    values = [event_value(i) for i in range(count)]
    events = [json.loads(v) for v in values]
    produce_records(bootstrap, USERS_TOPIC, ((e["user"].encode(), v) for e, v in zip(events, values, strict=True)))
    return ExpectedUpserts(Path(), "user", "amount", {e["user"]: e["amount"] for e in events})


def main() -> int:
    parser = argparse.ArgumentParser(description="Sharelake demo")
    parser.add_argument("--records", type=int, default=20_000, help="JSON records (and half as many Avro ones)")
    parser.add_argument(
        "--work-dir", type=Path, default=CACHE_DIR / "demo", help="where the broker, registry and tables go (emptied)"
    )
    args = parser.parse_args()
    # the check's own session: the checkout's jars, on the loopback address like the job's
    os.environ.setdefault("SHARELAKE_JARS", jars_env())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    demo_dir = args.work_dir.resolve()
    shutil.rmtree(demo_dir, ignore_errors=True)
    table, avro_table, users_table = demo_dir / "events", demo_dir / "avro_events", demo_dir / "users"

    print(f"[demo] starting an embedded Kafka broker (KRaft, share groups) under {demo_dir}/broker")
    print(f"[demo] starting an embedded schema registry (Apicurio, Confluent-compatible API) under {demo_dir}/registry")
    with EmbeddedKafka(demo_dir / "broker") as broker, EmbeddedSchemaRegistry(demo_dir / "registry") as registry:
        broker.create_topic(TOPIC, partitions=3)
        broker.create_topic(AVRO_TOPIC, partitions=3)
        broker.create_topic(USERS_TOPIC, partitions=3)
        t0 = time.monotonic()
        half = args.records // 2
        produced = produce_json_events(broker.bootstrap, TOPIC, half)
        poison = produce_poison_records(broker.bootstrap, TOPIC)  # in the middle of the stream
        produced += produce_json_events(broker.bootstrap, TOPIC, args.records - half, start=half)
        avro, avro_poison = produce_avro_events(registry.url, broker.bootstrap, args.records // 2)
        users = replace(produce_user_events(broker.bootstrap, args.records // 2), table=users_table)
        print(
            f"[demo] produced {len(produced)} JSON records and {len(poison)} poison records to {TOPIC}, "
            f"{len(avro)} Avro records (schema v1, then v2 adding `region`) and {len(avro_poison)} poison records "
            f"to {AVRO_TOPIC}, {args.records // 2} JSON records keyed by their {len(users.newest)} users to "
            f"{USERS_TOPIC}, in {time.monotonic() - t0:.1f}s"
        )
        cmd = [
            str(ROOT / "spark-submit.sh"), str(ROOT / "jobs" / "main.py"), "ingest",
            "--config", str(ROOT / "conf" / "local.toml"),
            "--set", f"kafka.bootstrap_servers={broker.bootstrap}",
            "--set", f'kafka.topics=["{TOPIC}", "{AVRO_TOPIC}", "{USERS_TOPIC}"]',
            "--set", "kafka.group_id=sharelake-demo",
            "--set", f"topics.{TOPIC}.table_path={table}",
            "--set", f"topics.{AVRO_TOPIC}.table_path={avro_table}",
            "--set", f"topics.{USERS_TOPIC}.table_path={users_table}",
            "--set", f"topics.{USERS_TOPIC}.write.mode=upsert",
            "--set", f'topics.{USERS_TOPIC}.write.keys=["user"]',
            "--set", f"dead_letter.table_path={demo_dir / 'dead_letter'}",
            "--set", "payload.format=json",
            "--set", f"payload.schema={EVENT_SCHEMA}",
            "--set", f"topics.{AVRO_TOPIC}.payload.format=avro",
            "--set", f"topics.{AVRO_TOPIC}.payload.registry.url={registry.url}",
            "--set", "run.mode=until-drained",
            "--set", "run.idle_timeout_ms=3000",
            "--summary",
        ]  # fmt: skip
        print("[demo] running the ingest job until the backlog is drained:")
        print("       " + " ".join(cmd[:5]) + " ...")
        t0 = time.monotonic()
        total = len(produced) + len(poison) + len(avro) + len(avro_poison) + args.records // 2
        # the bar (in a terminal only) closes at `run ended:`: the table summary follows, below it
        rc = follow_job(cmd, total, "[demo] decided", after_line=rate_after, close_on="run ended:")
        print(
            f"[demo] ingest job exited with {rc} after {time.monotonic() - t0:.1f}s; stopping the broker and registry"
        )
    if rc != 0:
        print(f"[demo] failed: the ingest job exited with {rc} (its cause is the `sharelake:` line above)")
        return rc
    print("[demo] checking the tables against what was produced (a Spark session of its own)")
    tables = [Expected(table, produced), Expected(avro_table, avro)]
    spark = build_spark("sharelake-demo-check", "local[2]", {"spark.ui.enabled": "false"})
    try:
        dead_letter = demo_dir / "dead_letter"
        proven = check_demo(spark, tables, dead_letter, poison + avro_poison, POISON_CLASSES, [users])
        print(f"[demo] checked: {proven}")
    except AssertionError as e:
        print(f"[demo] failed: the tables do not hold what was produced: {e}")
        return 1
    finally:
        spark.stop()
    return 0


def rate_after(line: str) -> str | None:
    """The rate line, after the job's `run ended:` line."""
    return rate_line(line) if "run ended:" in line else None


def rate_line(run_ended: str) -> str:
    """The ingest rate from the job's `run ended:` counters: records decided / (first poll -> last commit)."""
    f = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", run_ended.split("run ended:", 1)[1])}
    decided = f.get("accepted", 0) + f.get("rejected", 0)
    ingest = f.get("ingest_s", 0.0)
    rate = f"{decided / ingest:,.0f} records/s" if ingest > 0 else "n/a"
    return (
        f"[demo] ingested {decided:,.0f} records in {ingest:.1f}s from the first poll to the last Delta commit: "
        f"{rate} (before that: {f.get('start_s', 0):.1f}s of start-up, the checks, the warm-up and the group "
        f"join; the first records came {f.get('first_record_s', 0) - f.get('start_s', 0):.1f}s after polling began)"
    )


if __name__ == "__main__":
    sys.exit(main())
