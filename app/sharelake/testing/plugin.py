"""The pytest plugin `pip install sharelake[testing]` registers: fixtures for testing a pipeline.

- `sharelake_broker`: a real Kafka broker with share groups (KRaft, one node, loopback), started
  once per session from jars fetched on first use (`sharelake.testing.kafka_broker`);
- `sharelake_registry`: a Confluent-compatible schema registry (Apicurio), once per session, for
  pipelines that read Avro, Protobuf or JSON Schema payloads;
- `sharelake_spark`: a local SparkSession with Delta, its jars (Delta, spark-avro, the Kafka client)
  those of `spark-jars.lock`, fetched into the kit's cache on first use (`sharelake.testing.maven_artifacts`);
- `sharelake_topic`: makes a fresh topic on the broker (`sharelake_topic(partitions=3)`), its name unique.

pytest loads this module in every run of an environment with Sharelake installed, so it imports
nothing heavy itself: pyspark, the pipeline and the Kafka client are imported by the fixture that
needs them, when a test first asks for it. A failing test that used the broker or the registry shows
its log tail. Run the pipeline with `sharelake.testing.run_until_drained` and compare with chispa
(`sharelake.testing.read_table`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sharelake.testing.kafka_broker import EmbeddedKafka
    from sharelake.testing.schema_registry import EmbeddedSchemaRegistry

# a small, loopback-only session: no UI, two cores, two shuffle partitions
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
}


@pytest.fixture(scope="session")
def sharelake_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    from sharelake.testing.kafka_broker import EmbeddedKafka

    kafka = EmbeddedKafka(tmp_path_factory.mktemp("sharelake-broker"))
    kafka.start()
    yield kafka
    kafka.stop()


@pytest.fixture(scope="session")
def sharelake_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedSchemaRegistry]:
    from sharelake.testing.schema_registry import EmbeddedSchemaRegistry

    registry = EmbeddedSchemaRegistry(tmp_path_factory.mktemp("sharelake-registry"))
    registry.start()
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def sharelake_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from sharelake.run.spark_session import build_spark, env_jar_folders
    from sharelake.testing.maven_artifacts import fetched

    warehouse = tmp_path_factory.mktemp("sharelake-warehouse")
    # the jars SHARELAKE_JARS names, else the kit's pinned Delta, spark-avro and Kafka client jars (its cache)
    jars = env_jar_folders() or [fetched("spark-jars.lock")]
    conf = {**SPARK_CONF, "spark.sql.warehouse.dir": str(warehouse)}
    session = build_spark("sharelake-test", "local[2]", conf, jar_folders=jars)
    yield session
    session.stop()


@pytest.fixture
def sharelake_topic(sharelake_broker: EmbeddedKafka) -> Callable[..., str]:
    """Makes a topic on the session's broker: `sharelake_topic(partitions=1, prefix="topic")` -> its name."""

    def make(partitions: int = 1, prefix: str = "topic") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        sharelake_broker.create_topic(name, partitions)
        return name

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failed test shows the log tail of the broker and registry it used."""
    outcome = yield
    report = outcome.get_result()
    used = getattr(item, "funcargs", {})
    if report.when == "call" and report.failed:
        for name in ("sharelake_broker", "sharelake_registry"):
            if name in used:
                report.sections.append((f"{name} log tail", used[name].tail_logs(40)))
