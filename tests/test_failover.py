"""Broker deaths on a replicated 3-node cluster while the job runs: nothing lost, doubled or dead-lettered.

The cluster (3 KRaft nodes, replication factor 3, min.insync.replicas 2) is started once for this
module; the rest of the suite keeps the single-node broker. `devkit.failover` runs the scenario
(`python -m bench failover` reports it alone): a steady producer, kill -9 of the node leading the most
partitions and of the group's coordinator (each restarted later), the job never restarted. The
stalls it measures are printed here and reported against their target by the benchmark, never
asserted on time.

`make chaos` runs this module (`long`: 95 s of CI time measured, the cluster's start and 35 s of load
around two deaths); CI skips it. CI still covers a broker going away under a running job, nothing
lost or doubled and nothing left in the group, with tests/test_failure_handling.py's
test_broker_restart_mid_run (the broker stopped, then restarted on the same data, while the job runs)
and tests/test_network_faults.py's cut_mid_batch (a job cut off from the broker mid-batch).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from pyspark.sql import SparkSession

from devkit.failover import run_failover
from devkit.kafka_cluster import EmbeddedKafkaCluster, group_partition
from tests.job_runner import JobSpec, run_summary, start_job
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once, dead_letter_rows

RECORDS = int(os.environ.get("SHARELAKE_FAILOVER_RECORDS", "70000"))  # 35 s of load at 2,000/s: both deaths fall in it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafkaCluster]:
    with EmbeddedKafkaCluster(tmp_path_factory.mktemp("cluster")) as kafka:
        yield kafka


@pytest.mark.long  # the cluster's own check, for the failover test below (`make chaos`): CI starts no cluster
def test_cluster_replicates_everything_and_names_the_group_coordinator(cluster: EmbeddedKafkaCluster) -> None:
    cluster.create_topic("replicated", partitions=2)
    meta = cluster.admin().list_topics("replicated", timeout=10).topics["replicated"]
    assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in meta.partitions.values())
    # the classic-group coordinator the broker names is the leader our hash picks
    admin = cluster.admin()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-hash-check"})
    consumer.subscribe(["replicated"])
    consumer.poll(3)
    described = admin.describe_consumer_groups(["g-hash-check"])["g-hash-check"].result(timeout=30)
    consumer.close()
    topics = cluster.admin().list_topics(timeout=10).topics  # the group created the offsets topic
    assert all(len(p.replicas) == 3 for p in topics["__consumer_offsets"].partitions.values())
    offsets = cluster.leaders("__consumer_offsets")
    assert offsets[group_partition("g-hash-check", len(offsets))] == described.coordinator.id


@pytest.mark.chaos
@pytest.mark.long  # CI: tests/test_failure_handling.py::test_broker_restart_mid_run (see the module's docstring)
def test_broker_deaths_lose_and_double_nothing(
    cluster: EmbeddedKafkaCluster, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(cluster, f"failover-{unique}", f"g-{unique}", tmp_path / "table", lock_ms=15000)
    cluster.create_topic(spec.topic, partitions=6)
    log = tmp_path / "job.log"

    run = run_failover(
        cluster, spec.topic, spec.group, spec.table,
        lambda: start_job(spec, "run.mode=continuous", log=log), records=RECORDS,
    )  # fmt: skip
    print(f"failover: {run.summary()}")
    text = log.read_text(errors="replace")

    assert len(run.deaths) == 2 and run.deaths[0].role.startswith("partition leader")
    assert run.job_survived, f"the job ended by itself (rc {run.job_rc}):\n{text[-3000:]}"
    assert run.job_rc in (0, 143), text[-3000:]
    summary = run_summary(log)
    print(f"failover run: {summary}")
    assert_exactly_once(spark, spec.table, run.produced)
    assert summary["rejected"] == 0 and summary["dead_lettered"] == 0, summary  # no fault dead-letters a record
    assert dead_letter_rows(spark, spec.table) == 0
    assert nothing_left(cluster, spec.topic, spec.group)
