"""A real Spark cluster running Sharelake from its installed wheel: a standalone master and worker.

The runtime environment (`make runtime-env`: a venv with requirements.txt and the wheel only) holds
pyspark, whose package ships no start-master script, so both are started with its `spark-class`. The
ingest job is submitted in client mode (standalone cluster mode does not take Python applications)
through `./spark-submit.sh --profile standalone` with that venv, from a directory outside the
checkout and with a copy of the entry point, so nothing of the tree's `app/` can be imported: the
job's banner names the installed package it ran from. The Delta writes run in a separate executor
JVM on the worker. The `--dry-run` checks show what each profile adds to the spark-submit command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from importlib.metadata import version
from itertools import pairwise
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.paths import RUNTIME_VENV
from devkit.sample_data import produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka, free_port
from tests.job_runner import ROOT
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

RUNTIME = RUNTIME_VENV  # `make runtime-env`
SPARK_CLASS = RUNTIME / "bin" / "spark-class"
SUBMIT = str(ROOT / "spark-submit.sh")


def dry_run(*args: str, job_args: tuple[str, ...] = ()) -> list[str]:
    out = subprocess.run(
        [SUBMIT, *args, "--dry-run", "jobs/main.py", "ingest", *job_args, "--config", "conf/local.toml"], **RUN
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


RUN: dict[str, object] = {"capture_output": True, "text": True, "timeout": 60, "cwd": ROOT}


def test_profiles_build_the_spark_submit_command() -> None:
    local = dry_run()
    assert local[local.index("--master") + 1] == "local\\[2\\]"
    standalone = dry_run("--profile", "standalone", "--master", "spark://h:7077")
    assert any(a.endswith("conf/spark/standalone.properties") for a in standalone)
    yarn = dry_run("--profile", "yarn", "--deploy-mode", "cluster", job_args=("--set", "run.app_name=orders-ingest"))
    assert yarn[yarn.index("--master") + 1] == "yarn" and yarn[yarn.index("--deploy-mode") + 1] == "cluster"
    # YARN names a cluster-mode application from spark-submit's name, before the driver runs: the job's run.app_name
    named = dict(pairwise(yarn)).get("--name")
    assert named == "orders-ingest", f"spark-submit's application name: {named}, not the job's run.app_name"
    assert dict(pairwise(local)).get("--name") == "sharelake-ingest"  # conf/local.toml's
    # the code travels installed, never as files of this tree: the packed runtime venv on YARN
    assert any(a.endswith("dist/sharelake-runtime.tar.gz#environment") for a in yarn)
    assert not any("--py-files" in cmd or "PYTHONPATH" in " ".join(cmd) for cmd in (local, standalone, yarn))
    assert yarn[yarn.index("--files") + 1] == "conf/local.toml" and yarn[-1] == "local.toml"
    refused = subprocess.run([SUBMIT, "--profile", "standalone", "--master", "spark://h:1", "--deploy-mode",
                              "cluster", "jobs/ingest.py"], **RUN)  # fmt: skip
    assert refused.returncode == 2 and "Spark cannot run Python apps in standalone cluster mode" in str(refused.stderr)


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path / "logs")}
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    work = tmp_path / "worker"
    logs = [(tmp_path / "master.log").open("wb"), (tmp_path / "worker.log").open("wb")]
    master = subprocess.Popen(
        [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(free_port())],
        stdout=logs[0], stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    wait_for(
        lambda: "I have been elected leader" in (tmp_path / "master.log").read_text(errors="replace"),
        60, interval_s=0.2, give_up=lambda: master.poll() is not None,
        failure=lambda: f"the Spark master was not elected leader in 60 s (exit {master.poll()}):\n"
        + (tmp_path / "master.log").read_text()[-2000:],
    )  # fmt: skip
    worker = subprocess.Popen(
        [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
         "--cores", "1", "--memory", "2g", "--work-dir", str(work), "--webui-port", str(free_port())],
        stdout=logs[1], stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    wait_for(
        lambda: "Successfully registered with master" in (tmp_path / "worker.log").read_text(errors="replace"),
        60, give_up=lambda: worker.poll() is not None,
        failure=lambda: f"the Spark worker did not register with the master in 60 s (exit {worker.poll()}):\n"
        + (tmp_path / "worker.log").read_text()[-2000:],
    )  # fmt: skip
    try:
        yield master_url, work
    finally:
        for p in (worker, master):
            p.terminate()
        for p in (worker, master):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def test_ingest_on_a_standalone_cluster_from_the_installed_wheel(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, standalone_cluster: tuple[str, Path]
) -> None:
    master_url, work = standalone_cluster
    topic = f"cluster-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, topic, 2000)
    elsewhere = tmp_path / "elsewhere"  # the job's working directory and entry point: not the checkout
    elsewhere.mkdir()
    entry = shutil.copy(ROOT / "jobs" / "main.py", elsewhere / "sharelake_job.py")
    config = shutil.copy(ROOT / "conf" / "local.toml", elsewhere / "job.toml")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [SUBMIT, "--profile", "standalone", "--master", master_url, str(entry), "ingest", "--config", str(config),
         "--set", f"kafka.bootstrap_servers={broker.bootstrap}", "--set", f"kafka.topic={topic}",
         "--set", f"kafka.group_id=g-{unique}", "--set", f"delta.table_path={tmp_path / 'table'}",
         "--set", "run.mode=available-now", "--set", "run.idle_timeout_ms=4000"],
        capture_output=True, text=True, timeout=400, cwd=elsewhere,
        env={**env, "SPARK_LOCAL_IP": "127.0.0.1", "SHARELAKE_VENV": str(RUNTIME)},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert_exactly_once(spark, tmp_path / "table", produced)
    # the driver ran the wheel installed in the runtime venv
    installed = RUNTIME / "lib" / "python3.11" / "site-packages" / "sharelake"
    assert f"Sharelake {version('sharelake')} starting (from {installed})" in output, output[-4000:]
    # the writes ran in an executor JVM the worker launched for this application, with the runtime venv's Python
    executor_logs = list(work.glob("app-*/*/stderr"))
    assert executor_logs, f"no executor ran on the worker: {list(work.rglob('*'))[:20]}"
    assert any("Executor" in p.read_text(errors="replace") for p in executor_logs)
