"""Tables by catalog name: `delta.table_name = "db.events"` in the Hive metastore pyspark ships.

The job runs in the test's SparkSession, whose catalog is that metastore (Derby; one JVM may open
it). A user reads the tables with `spark.table`: the main table, and the dead-letter table its
name gives (`events_dead_letter`); a restart finds them by name; a database that does not exist is
one clear line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events, produce_records
from sharelake.config.loader import load_config
from sharelake.failures.errors import ConfigError
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import ROOT, JobSpec, drain_in_process
from tests.table_checks import KEY_COLUMNS


def test_ingest_into_tables_by_catalog_name(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    db = f"lake_{unique}"
    spark.sql(f"CREATE DATABASE {db}")
    name = f"{db}.events"
    spec = JobSpec(broker, f"named-{unique}", f"g-{unique}", tmp_path / "unused", table_name=name)
    broker.create_topic(spec.topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, spec.topic, 1500)
    produced += produce_records(broker.bootstrap, spec.topic, [(b"tombstone", None)])  # dead-lettered: null_value

    assert drain_in_process(spark, spec, tmp_path / "run1.log", idle_ms=4000) == 0, (tmp_path / "run1.log").read_text()[
        -3000:
    ]
    assert spark.table(name).count() == 1500
    # where the catalog puts a new table of the database, shown in the banner
    location = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0]["location"]
    assert location.endswith(f"/{db}.db/events")
    assert f"-> table {name} (at {location})" in (tmp_path / "run1.log").read_text()

    # a restart finds the tables by name and adds to them
    produced += produce_json_events(broker.bootstrap, spec.topic, 1500, start=1500)
    assert drain_in_process(spark, spec, tmp_path / "run2.log", idle_ms=4000) == 0, (tmp_path / "run2.log").read_text()[
        -3000:
    ]

    landed = spark.table(name).select("topic", "partition", "offset", "key", "value")
    good = [(p.topic, p.partition, p.offset, p.key, p.value) for p in produced if p.value is not None]
    assert landed.count() == landed.distinct().count() == 3000
    assert landed.exceptAll(spark.createDataFrame(good, KEY_COLUMNS)).count() == 0
    dead = spark.table(f"{name}_dead_letter").collect()
    assert [(r["key"], r["error_class"]) for r in dead] == [(b"tombstone", "null_value")]


def test_a_name_in_a_database_that_does_not_exist_is_one_line(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(broker, f"nodb-{unique}", f"g-{unique}", tmp_path / "unused", table_name=f"nodb_{unique}.events")
    broker.create_topic(spec.topic, partitions=1)
    cfg = load_config(ROOT / "conf" / "local.toml", spec.sets("run.mode=until-drained"))
    with pytest.raises(ConfigError) as e:
        run_ingest(spark, cfg)
    assert str(e.value) == (
        f"delta.table_name = 'nodb_{unique}.events': database nodb_{unique} does not exist in the session's "
        f"catalog; create it (CREATE DATABASE nodb_{unique}) or fix the name"
    )
