"""Partitioned and clustered tables: real broker, real Delta, the job as users submit it, a kill -9.

A table partitioned by the day of a payload timestamp (a generated column): the job is killed
right after its second commit (durable, not ACCEPTed) and run again. What a user checks: every
record once, each row in the partition of its own day, one data file per day a commit touched (not
one per day and task), the layout in the Delta log, nothing left to deliver (a sentinel). A table
clustered by `user`: the clustering in the log, `sharelake maintain` clustering it, and a second
job asking for another layout stopping at start with one line naming both.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from devkit.sample_data import Produced, produce_records
from sharelake.cli import main as sharelake
from sharelake.config.loader import load_config
from sharelake.failures.errors import ConfigError
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import ROOT, JobSpec, drain_in_process, run_job, run_summary
from tests.kafka_helpers import nothing_left

RECORDS = 6000
DAYS = 30
SCHEMA = "id long, user string, ts timestamp"
FIRST_DAY = datetime(2026, 10, 1, tzinfo=UTC)


def produce_events(broker: EmbeddedKafka, topic: str) -> list[Produced]:
    """RECORDS events whose `ts` spread over DAYS days, the days interleaved (every batch spans many)."""
    values = (
        (
            f"k-{i}".encode(),
            json.dumps(
                {"id": i, "user": f"user-{i % 7}", "ts": (FIRST_DAY + timedelta(days=i % DAYS, seconds=i)).isoformat()}
            ).encode(),
        )
        for i in range(RECORDS)
    )
    return produce_records(broker.bootstrap, topic, values)


def landed_once(spark: SparkSession, table: Path, produced: list[Produced]) -> None:
    """The table holds exactly the produced events, each once (topic, partition, offset, id)."""
    rows = [(p.topic, p.partition, p.offset, json.loads(p.value or b"{}")["id"]) for p in produced]
    expected = spark.createDataFrame(rows, "topic string, partition int, offset long, id long")
    actual = spark.read.format("delta").load(str(table)).select("topic", "partition", "offset", "id")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def layout_spec(
    broker: EmbeddedKafka, topic: str, group: str, table: Path, tmp_path: Path, layout: tuple[str, ...]
) -> JobSpec:
    """The job on `topic`'s JSON events into `table`, with the `layout` keys (`--set`s)."""
    return JobSpec(
        broker,
        topic,
        group,
        table,
        lock_ms=10_000,
        checkpoint=tmp_path / "clock",
        settings=("payload.format=json", f"payload.schema={SCHEMA}", *layout),
    )


def test_a_table_partitioned_by_the_day_of_a_payload_timestamp_lands_each_record_once_across_a_kill(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"by-day-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_events(broker, topic)
    table = tmp_path / "events"
    layout = ('delta.partition_by=["day"]', "delta.generated_columns.day=CAST(ts AS DATE)")
    spec = layout_spec(broker, topic, f"g-{unique}", table, tmp_path, layout)

    first = tmp_path / "run1.log"  # its second commit is durable, its records not ACCEPTed: then kill -9
    rc = run_job(spec, "run.mode=until-drained", faults="kill@after_delta_commit#2", log=first)
    assert rc != 0, first.read_text()[-3000:]
    written = spark.read.format("delta").load(str(table)).count()
    assert 0 < written < RECORDS, written
    second = tmp_path / "run2.log"
    assert drain_in_process(spark, spec, second, idle_ms=12_000) == 0, second.read_text()[-3000:]

    landed_once(spark, table, produced)
    df = spark.read.format("delta").load(str(table))
    assert df.where("day <> CAST(ts AS DATE)").count() == 0  # each row in its own day's partition
    detail = DeltaTable.forPath(spark, str(table)).detail().first()
    assert detail is not None and list(detail["partitionColumns"]) == ["day"]
    assert df.select("day").distinct().count() == DAYS
    for version, days in files_per_day(table).items():  # one file per day a commit touched
        assert max(days.values()) == 1, f"version {version} wrote {max(days.values())} files for one day"
    assert run_summary(second)["concurrent_claims"] == 0
    assert nothing_left(broker, topic, spec.group)


def test_a_clustered_table_is_clustered_by_maintain_and_a_job_asking_another_layout_stops_at_start(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"clustered-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_events(broker, topic)
    table = tmp_path / "events"
    spec = layout_spec(broker, topic, f"g-{unique}", table, tmp_path, ('delta.cluster_by=["user"]',))
    assert drain_in_process(spark, spec, tmp_path / "run.log") == 0, (tmp_path / "run.log").read_text()[-3000:]

    detail = DeltaTable.forPath(spark, str(table)).detail().first()
    assert detail is not None and list(detail["clusteringColumns"]) == ["user"]
    assert list(detail["partitionColumns"]) == []
    args = ["--config", str(ROOT / "conf" / "local.toml")]
    for setting in spec.sets():
        args += ["--set", setting]
    assert sharelake(["maintain", *args]) == 0
    optimize = DeltaTable.forPath(spark, str(table)).history().where("operation = 'OPTIMIZE'").collect()
    assert optimize and "user" in optimize[0]["operationParameters"]["clusterBy"], optimize
    landed_once(spark, table, produced)

    # the same keys, another layout (the later --set wins): the start stops with the config's one line, in
    # this session (the entry point's exit 2 and one printed line for a ConfigError are tested on their own,
    # tests/test_config_errors.py and tests/test_ingest_job_submit.py: no driver JVM to start here, 12 s)
    other = layout_spec(broker, topic, spec.group, table, tmp_path, ('delta.partition_by=["user"]',))
    with pytest.raises(ConfigError) as refused:
        run_ingest(spark, load_config(ROOT / "conf" / "local.toml", other.sets("run.mode=until-drained")))
    line = str(refused.value)
    assert "\n" not in line and "clustered by (user)" in line and "partitioned by (user)" in line, line


def files_per_day(table: Path) -> dict[int, Counter[str]]:
    """For each commit that added files: how many it added per `day` partition value."""
    out: dict[int, Counter[str]] = {}
    for path in sorted((table / "_delta_log").glob("*.json")):
        adds = [json.loads(line)["add"] for line in path.read_text().splitlines() if line.startswith('{"add"')]
        if adds:
            out[int(path.stem)] = Counter(a["partitionValues"]["day"] for a in adds)
    return out
