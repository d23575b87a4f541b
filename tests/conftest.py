"""Session fixtures: one real embedded Kafka broker and one local SparkSession with Delta.

Every test that crosses Kafka, Spark or Delta uses these (no fakes). Test data lives under the
pytest session's temp dir. The broker and the schema registry (Apicurio, `registry`, started once
for the tests that ask for it) are the testing kit's (`sharelake.testing.plugin`, which the installed
package registers with pytest): a failing test shows their log tails.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit import network
from devkit.paths import CLASS_ARCHIVES, jars_env
from devkit.s3_server import EmbeddedS3
from sharelake.failures import faults
from sharelake.run.class_archive import ARCHIVES_ENV
from sharelake.run.spark_session import build_spark, launch_conf
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.plugin import SPARK_CONF
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry
from tests.table_checks import DownstreamStream

logging.getLogger("py4j").setLevel(logging.WARNING)
# the checkout's jars for every session the tests start, in-process and in `sharelake` subprocesses
os.environ.setdefault("SHARELAKE_JARS", jars_env())
os.environ.setdefault(ARCHIVES_ENV, str(CLASS_ARCHIVES))  # the driver JVM's class archive, when built

# beside Sharelake's own settings (sharelake.run.spark_session.SHARELAKE_CONF): the kit's small, loopback-only session
TEST_SPARK_CONF = SPARK_CONF


@pytest.fixture(scope="session")
def broker(sharelake_broker: EmbeddedKafka) -> EmbeddedKafka:
    """The session's broker: the testing kit's (sharelake.testing.plugin), as users' tests get it."""
    return sharelake_broker


@pytest.fixture(scope="session")
def registry(sharelake_registry: EmbeddedSchemaRegistry) -> EmbeddedSchemaRegistry:
    """The kit's schema registry (Apicurio, in memory); a test that pauses it resumes it."""
    return sharelake_registry


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Iterator[EmbeddedS3]:
    """An S3 API server (S3Proxy) for the session; the test SparkSession's S3A points at it."""
    server = EmbeddedS3(tmp_path_factory.mktemp("s3"))
    server.start()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    settings = {k.removeprefix("spark.hadoop."): v for k, v in server.spark_conf().items()}
    # in-process only: a job gets its credentials from its environment (EmbeddedS3.credentials_env)
    settings |= {"fs.s3a.access.key": server.credentials_env()["AWS_ACCESS_KEY_ID"]}
    settings |= {"fs.s3a.secret.key": server.credentials_env()["AWS_SECRET_ACCESS_KEY"]}
    for key, value in settings.items():
        hadoop.set(key, value)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[network.Network]:
    """A network of hosts for the network-fault tests (`devkit.network`): a broker on a host of its
    own (`net_broker`), the test's client, and two job hosts. Root only (network namespaces).
    At its end no namespace of this session may be left: that fails the run."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CI and the dev machines run as root)")
    session_net = network.Network("s")
    for name in ("broker", "client", "job1", "job2"):
        session_net.host(name)
    yield session_net
    unhealed = session_net.close()
    left = network.ours()
    assert not unhealed and not left, f"network left behind: faults {unhealed}, namespaces {left}"


@pytest.fixture(scope="session")
def net_broker(net: network.Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    """A Kafka node on the network's `broker` host: only the network's hosts reach it."""
    kafka = EmbeddedKafka(tmp_path_factory.mktemp("net-broker"), host=net.host("broker"))
    kafka.start()
    yield kafka
    kafka.stop()


@pytest.fixture
def net_faults(net: network.Network) -> Iterator[network.Network]:
    """The network, for a test that applies faults: one still applied when the test ends is healed
    and fails the test (each scenario heals what it applied, on every path)."""
    yield net
    unhealed = net.close_faults()
    if unhealed:
        pytest.fail(f"faults not healed by the test: {unhealed}")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The tests' SparkSession, with the Hive metastore pyspark ships (Derby, in the session's temp
    dir) as its catalog: tables by name (`db.events`) work as on a cluster's metastore."""
    catalog = tmp_path_factory.mktemp("catalog")
    hive = {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(catalog / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={catalog / 'db'};create=true",
    }
    conf = {**TEST_SPARK_CONF, **hive}
    java_options = launch_conf()["spark.driver.extraJavaOptions"]
    conf["spark.driver.extraJavaOptions"] = f"{java_options} -Dderby.system.home={catalog}"
    session = build_spark("sharelake-tests", "local[2]", conf)
    yield session
    session.stop()


@pytest.fixture
def clean_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    """No fault point armed: the in-process hit counts reset and SHARELAKE_FAULTS unset, for a test
    that runs the pipeline in-process and arms its own (`pytestmark = pytest.mark.usefixtures(...)`)."""
    faults.reset()
    monkeypatch.delenv(faults.ENV, raising=False)


@pytest.fixture
def downstream(spark: SparkSession) -> Iterator[Callable[[Path, Path], DownstreamStream]]:
    """Starts a downstream Delta streaming query on a table (`DownstreamStream`); stopped after the test."""
    started: list[DownstreamStream] = []

    def start(table: Path, out: Path) -> DownstreamStream:
        started.append(DownstreamStream(spark, table, out))
        return started[-1]

    yield start
    for stream in started:
        if stream.query.isActive:
            stream.query.stop()


@pytest.fixture
def unique() -> str:
    """A short unique suffix for topic, group and table names, so tests never share state."""
    return uuid.uuid4().hex[:8]


# modules that start a cluster or a scheduler of their own, minutes each: on two workers (`make test`)
# they are handed out first, so that neither worker is left running one alone at the end
FIRST_MODULES = ("test_kubernetes.py", "test_yarn.py", "test_airflow.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The cluster modules first (a stable sort: every worker collects the same order); the `long`
    variants run only under `make chaos` (SHARELAKE_LONG=1): CI's time is bounded."""
    items.sort(key=lambda item: item.path.name not in FIRST_MODULES)
    if os.environ.get("SHARELAKE_LONG") == "1":
        return
    skip = pytest.mark.skip(reason="a long variant: `make chaos` runs it")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    # the session's broker and registry are the kit's: its plugin shows their log tails
    if report.when == "call" and report.failed and "net_broker" in getattr(item, "funcargs", {}):
        report.sections.append(("embedded broker log tail (net_broker)", item.funcargs["net_broker"].tail_logs(40)))
    if report.when == "call" and report.failed and "s3" in getattr(item, "funcargs", {}):
        report.sections.append(("embedded S3 server log tail", item.funcargs["s3"].tail_logs(40)))
