"""Sharelake on a real YARN cluster, its tables on HDFS, submitted as a user submits it.

The cluster is Hadoop's own (`devkit.yarn_cluster`: a ResourceManager, a NodeManager launching real
containers, a NameNode and a DataNode). What an operator sets up once per cluster is done once per
session, as docs/operations.md tells a user: the packed runtime venv (`make runtime-pack`) put on
HDFS, and Spark's jars found on every node (`spark.yarn.jars=local:...`, as a cluster with Spark
installed has them). Each job is then `./spark-submit.sh --profile yarn` with the sizes a small
cluster takes, the config file shipped by the script in cluster mode, the application named by the
config's `run.app_name` alone (no spark.app.name), as a user's is. The executors' Python (and,
in cluster mode, the driver's) is the archive YARN unpacked, never this checkout's.

Each run is checked record by record against the topic (chispa), with a sentinel proving the group
has nothing left. In cluster mode the driver is killed with its container (SIGKILL to the
container's process group, as a lost node or an OOM kill): YARN starts a second attempt with the
same arguments, which must find the table and the group as the first left them, the first's locks
still held, and land the rest exactly once without any manual step. CI runs the client-mode backlog
(YARN, HDFS, the runtime archive the executors unpack: about half the wall time of the cluster-mode
kill, whose two attempts each wait for a container's localization and a cold driver); the driver
killed in cluster mode, the executor killed and two jobs on one table are `make chaos`'s (`long`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.paths import CACHE_DIR, RUNTIME_VENV
from devkit.sample_data import Produced, produce_json_events
from devkit.yarn_cluster import YarnCluster, wait_for_application
from sharelake.testing.kafka_broker import EmbeddedKafka, free_port
from tests.job_runner import ROOT, run_summary
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

RUNTIME = RUNTIME_VENV  # the client's venv for a client-mode driver
RUNTIME_ARCHIVE = CACHE_DIR / "dist" / "sharelake-runtime.tar.gz"  # `make runtime-pack`
SPARK_JARS_ON_NODES = RUNTIME / "lib" / "python3.11" / "site-packages" / "pyspark" / "jars"
# what fits one NodeManager (4 GB for containers): a driver and one executor of 1 GB
SMALL_CLUSTER = {
    "spark.driver.memory": "1g",
    "spark.executor.memory": "1g",
    "spark.executor.instances": "1",
    "spark.executor.cores": "1",
    "spark.yarn.maxAppAttempts": "2",
    # no web UI: a client-mode driver's SparkContext failed once in CI with a ConcurrentModificationException in
    # Jetty's ServletHandler while the UI attached its handlers (a race inside Spark's start, most likely with
    # the application master adding its proxy filter to them), not Sharelake's; nothing here reads the UI
    "spark.ui.enabled": "false",
}


@dataclass
class Yarn:
    cluster: YarnCluster
    archive: str  # the runtime archive on HDFS

    def submit(
        self, deploy_mode: str, sets: list[str], log: Path, conf: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """`./spark-submit.sh --profile yarn` as a user runs it from an edge node (`conf`: more --conf). No
        spark.app.name: the application is named by the job's run.app_name (`job_sets`), as a user's is."""
        conf = {
            **SMALL_CLUSTER,
            **(conf or {}),
            "spark.archives": f"{self.archive}#environment",
            "spark.yarn.jars": f"local:{SPARK_JARS_ON_NODES}/*",
        }
        args = [str(ROOT / "spark-submit.sh"), "--profile", "yarn", "--deploy-mode", deploy_mode]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        args += [str(ROOT / "jobs" / "main.py"), "ingest", "--config", str(ROOT / "conf" / "local.toml")]
        for s in sets:
            args += ["--set", s]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env |= {"HADOOP_CONF_DIR": str(self.cluster.conf_dir), "SHARELAKE_VENV": str(RUNTIME)}
        with log.open("wb") as out:
            return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


@pytest.fixture(scope="module")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Yarn]:
    if not RUNTIME_ARCHIVE.exists():
        pytest.fail(f"no runtime archive {RUNTIME_ARCHIVE}: `make runtime-pack` builds it (`make test` does)")
    cluster = YarnCluster(tmp_path_factory.mktemp("yarn"))
    cluster.start()
    try:
        cluster.fs("-mkdir", "-p", "/apps/sharelake")
        cluster.fs("-put", "-f", str(RUNTIME_ARCHIVE), "/apps/sharelake/")
        yield Yarn(cluster, f"{cluster.hdfs_url}/apps/sharelake/{RUNTIME_ARCHIVE.name}")
    finally:
        cluster.stop()


def backlog(yarn: Yarn, broker: EmbeddedKafka, topic: str, records: int) -> tuple[str, str, str, list[Produced]]:
    """A 2-partition topic holding `records` events, its group, and its table's path on HDFS."""
    broker.create_topic(topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, topic, records)
    return topic, f"g-{topic}", f"{yarn.cluster.hdfs_url}/tables/{topic}", produced


def job_sets(broker: EmbeddedKafka, topic: str, group: str, table: str, *more: str) -> list[str]:
    return [
        f"run.app_name=sharelake-{topic}",  # the YARN application's name: spark-submit.sh passes it as --name
        f"kafka.bootstrap_servers={broker.bootstrap}",
        f"kafka.topic={topic}",
        f"kafka.group_id={group}",
        f"delta.table_path={table}",
        "run.mode=until-drained",
        "run.idle_timeout_ms=6000",
        *more,
    ]


def finish(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = None
    assert code == 0, (
        f"spark-submit exited {code} (None: still running after {timeout_s:.0f}s):\n"
        + log.read_text(errors="replace")[-4000:]
    )


def driver_log(cluster: YarnCluster, app_id: str, attempt: int) -> str:
    """The driver's log of one attempt in cluster mode: its ApplicationMaster container's output
    (Sharelake's lines on stdout, Spark's on stderr)."""
    logs = cluster.container_logs(app_id)
    return "".join(text for path, text in logs.items() if f"_{attempt:02d}_000001/std" in path)


def stamp(line: str) -> datetime:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


# CI's YARN test: the job submitted to YARN, its executors in containers from the runtime archive, its table on HDFS
def test_a_backlog_lands_once_on_hdfs_from_a_client_mode_driver(
    yarn: Yarn, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group, table, produced = backlog(yarn, broker, f"yarn-client-{unique}", 3000)
    log = tmp_path / "client.log"
    name = f"sharelake-{topic}"  # the job's run.app_name (job_sets)
    proc = yarn.submit("client", job_sets(broker, topic, group, table), log)
    finish(proc, log, 400)
    output = log.read_text(errors="replace")
    # the driver ran here, from the installed wheel; the writes ran in a YARN container
    assert f"{topic} -> table {table}" in output, output[-3000:]
    # the YARN application is named by the config's run.app_name
    app = yarn.cluster.application(name)
    assert app is not None, f"no YARN application named {name}: {[a['name'] for a in yarn.cluster.applications()]}"
    assert app["final_state"] == "SUCCEEDED", app
    executor_logs = [text for path, text in yarn.cluster.container_logs(app["id"]).items() if path.endswith("stderr")]
    assert any("CoarseGrainedExecutorBackend" in text for text in executor_logs), list(executor_logs)[:3]
    assert_exactly_once(spark, table, produced)
    assert nothing_left(broker, topic, group)


# `make chaos` (CI time: 270 s, two attempts each localizing and warming a driver in a container). CI still
# covers a killed driver's restart landing the rest exactly once in tests/test_chaos.py (the kill loop) and
# tests/test_crash_recovery.py (the crash points), and YARN with HDFS through the client-mode backlog above
@pytest.mark.long
def test_the_driver_killed_in_cluster_mode_and_the_second_attempt_lands_the_rest_once(
    yarn: Yarn, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group, table, produced = backlog(yarn, broker, f"yarn-cluster-{unique}", 20_000)
    log = tmp_path / "submit.log"
    name = f"sharelake-{topic}"
    # small batches, so the kill strikes between commits with records polled and locked in between
    sets = job_sets(broker, topic, group, table, "pump.max_poll_records=500", "batch.max_records=2000",
                    "kafka.record_lock_duration_ms=15000", f"metrics.prometheus_port={free_port()}")  # fmt: skip
    proc = yarn.submit("cluster", sets, log)
    app_id = wait_for_application(yarn.cluster, name)["id"]  # named by run.app_name before the driver runs
    wait_for(
        lambda: re.search(r"batch [1-9]\d*: in=", driver_log(yarn.cluster, app_id, 1)) is not None,
        300, interval_s=1.0, give_up=lambda: proc.poll() is not None,
        failure=lambda: f"the first attempt committed no batch:\n{driver_log(yarn.cluster, app_id, 1)[-4000:]}",
    )  # fmt: skip
    # the driver inside the cluster names where to scrape it, and answers there
    endpoint = re.search(r"Prometheus metrics on (http://\S+/metrics)", driver_log(yarn.cluster, app_id, 1))
    assert endpoint is not None, driver_log(yarn.cluster, app_id, 1)[-3000:]
    with urllib.request.urlopen(endpoint[1], timeout=10) as scraped:
        assert b"sharelake_accepted_total" in scraped.read()
    yarn.cluster.kill_driver(app_id)
    killed_at = time.monotonic()
    finish(proc, log, 600)  # spark-submit follows the application to its end, across attempts
    recovered_s = time.monotonic() - killed_at
    attempts = yarn.cluster.attempts(app_id)
    assert len(attempts) == 2, attempts
    app = yarn.cluster.application(name)
    assert app is not None and app["final_state"] == "SUCCEEDED", app
    first, second = driver_log(yarn.cluster, app_id, 1), driver_log(yarn.cluster, app_id, 2)
    assert "run ended" not in first, first[-3000:]
    ended = re.findall(r"run ended: .*", second)
    assert ended, second[-4000:]
    assert_exactly_once(spark, table, produced)
    assert nothing_left(broker, topic, group)
    # the second attempt's start to the end of its run (a micro-batch's progress line comes once its
    # rounds end, so it no longer marks the first commit): what a driver restart costs a table
    lines = second.splitlines()
    started = next(stamp(line) for line in lines if " sharelake.run.pipeline: Sharelake " in line)
    run_end = next(stamp(line) for line in lines if "run ended: " in line)
    print(
        f"yarn driver kill: {len(produced)} records, attempt 2 start to its run's end "
        f"{(run_end - started).total_seconds():.1f}s, kill to application end {recovered_s:.0f}s; {ended[-1]}"
    )


@pytest.mark.long
def test_an_executor_container_killed_during_a_write_costs_a_retry_not_a_record(
    yarn: Yarn, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group, table, produced = backlog(yarn, broker, f"yarn-executor-{unique}", 30_000)
    log = tmp_path / "client.log"
    sets = job_sets(broker, topic, group, table, "pump.max_poll_records=500", "batch.max_records=2000",
                    "kafka.record_lock_duration_ms=60000")  # fmt: skip
    known = {app["id"] for app in yarn.cluster.applications()}
    proc = yarn.submit("client", sets, log)
    wait_for(
        lambda: re.search(r"batch [1-9]\d*: in=", log.read_text(errors="replace")) is not None,
        300, interval_s=0.5, give_up=lambda: proc.poll() is not None,
        failure=lambda: f"the job committed no batch:\n{log.read_text(errors='replace')[-4000:]}",
    )  # fmt: skip
    (app,) = [a for a in yarn.cluster.applications() if a["id"] not in known]
    killed = yarn.cluster.kill_containers(app["id"], "CoarseGrainedExecutorBackend")
    finish(proc, log, 600)
    # YARN launched another executor container in the lost one's place
    executors = {path.split("/")[-2] for path, text in yarn.cluster.container_logs(app["id"]).items()
                 if "CoarseGrainedExecutorBackend" in text and "_000001/" not in path}  # fmt: skip
    assert len(executors) >= 2, executors
    assert_exactly_once(spark, table, produced)
    assert nothing_left(broker, topic, group)
    fields = run_summary(log)
    print(
        f"yarn executor kill: {len(produced)} records, executor pid(s) {killed} killed; "
        f"max_cycle_s={fields['max_cycle_s']} mean_cycle_s={fields['mean_cycle_s']} "
        f"failed_attempts={fields['failed_attempts']} executor containers {len(executors)}"
    )


@pytest.mark.long
def test_two_jobs_on_one_hdfs_table_land_each_record_once(
    yarn: Yarn, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    """HDFS gives Delta its mutual exclusion: two jobs in one share group, one table, at once."""
    topic, group, table, produced = backlog(yarn, broker, f"yarn-two-{unique}", 30_000)
    sets = job_sets(broker, topic, group, table, "pump.max_poll_records=500", "batch.max_records=2000")
    logs = [tmp_path / f"job{i}.log" for i in (1, 2)]
    # two drivers and two executors in one NodeManager: the executors smaller
    jobs = [yarn.submit("client", [*sets, f"run.app_name=sharelake-{topic}-{i}"], log,
                        conf={"spark.executor.memory": "512m"}) for i, log in enumerate(logs)]  # fmt: skip
    for job, log in zip(jobs, logs, strict=True):
        finish(job, log, 600)
    summaries = [run_summary(log) for log in logs]
    assert_exactly_once(spark, table, produced)
    assert nothing_left(broker, topic, group)
    accepted = [int(s["accepted"]) for s in summaries]
    conflicts = [int(s["commit_conflicts"]) for s in summaries]
    assert all(accepted), f"a job landed nothing: {accepted}"  # both wrote: the table had two writers
    print(
        f"yarn two jobs on one HDFS table: {len(produced)} records, accepted {accepted}, commit conflicts {conflicts}"
    )
