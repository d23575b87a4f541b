"""Sharelake on a real one-node Kubernetes, submitted as a user submits it.

The cluster is `devkit.k8s` (etcd, the control plane, a kubelet on containerd with runc, kube-proxy,
a CNI bridge and CoreDNS), built once per machine by `make k8s` and started once per module here.
What a user sets up once per cluster is done once: the namespace, service account and role of
docs/examples/k8s/rbac.yaml, Sharelake's image built from the repository's Dockerfile and loaded
into the node's containerd, and a volume the tables live on (a PersistentVolumeClaim, mounted at
the same path in every pod and on this machine, as a shared file system is). Each job's config is a
ConfigMap mounted by docs/examples/k8s/driver-pod-template.yaml; the broker listens on this
machine's address on the pod network, where the pods reach it as they would a broker of the
user's.

Each run is checked record by record against the topic (chispa), with a sentinel proving the group
has nothing left. Without a built cluster (`make k8s`) the module is skipped with one line: CI never
builds the cluster cold. CI runs the cluster-mode backlog (with its metrics and `sharelake status`),
the driver force-killed under a Job (a client-mode driver in a pod) and the driver deleted with its
grace period; `make chaos` adds a client-mode driver on this machine, an executor pod deleted during
a write, a CronJob with a run by hand beside it, and Airflow's Kubernetes task.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pyspark.sql import SparkSession

from devkit.delta_log import data_commits, read_commits
from devkit.k8s import cluster as k8s_cluster
from devkit.k8s import network as pod_network
from devkit.paths import VENV_BIN
from devkit.sample_data import Produced, produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.airflow_home import AirflowHome, airflow_home, the_new_run
from tests.airflow_home import finish as finish_airflow
from tests.job_runner import ROOT, JobSpec, drain_in_process, run_summary
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

T = TypeVar("T")
EXAMPLES = ROOT / "docs" / "examples" / "k8s"
NAMESPACE = "sharelake"
# Sharelake's image as `make image` builds it from the repository's Dockerfile
IMAGE = os.environ.get("SHARELAKE_IMAGE", f"localhost/sharelake:{version('sharelake')}")
# a driver and an executor that fit the one node beside another job's (two CPUs): small requests
SMALL = {
    "spark.driver.memory": "1g",
    "spark.executor.memory": "1g",
    "spark.executor.instances": "1",
    "spark.kubernetes.driver.request.cores": "0.25",
    "spark.kubernetes.executor.request.cores": "0.25",
}

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(
        not k8s_cluster.built(), reason=f"no Kubernetes built in {k8s_cluster.CACHE}: `make k8s` builds it once"
    ),
]


class NodeHost:
    """This machine at its address on the pod network: a broker bound here is what the pods reach."""

    address = pod_network.NODE_IP

    def command(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)


@dataclass
class Kube:
    cluster: k8s_cluster.K8sCluster
    tables: Path  # the tables' volume: this folder on the node, the same path in every pod
    templates: Path

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> str:
        return self.cluster.kubectl("-n", NAMESPACE, *args, check=check, input=input)

    def config_map(self, name: str, toml: str) -> None:
        """The job's config as a ConfigMap (`job.toml`), as a user creates it from a file."""
        self.kubectl("create", "configmap", name, "--from-file=job.toml=/dev/stdin", input=toml)

    def driver_template(self, config_map: str) -> Path:
        """docs/examples/k8s/driver-pod-template.yaml with the job's ConfigMap named."""
        text = (EXAMPLES / "driver-pod-template.yaml").read_text().replace("sharelake-orders", config_map)
        path = self.templates / f"{config_map}.yaml"
        path.write_text(text)
        return path

    def executor_template(self) -> Path:
        """docs/examples/k8s/executor-pod-template.yaml with this machine's user (a client-mode driver's)."""
        text = (EXAMPLES / "executor-pod-template.yaml").read_text()
        path = self.templates / "executor-pod-template.yaml"
        path.write_text(text.replace("runAsUser: 1000", f"runAsUser: {os.getuid()}")
                        .replace("runAsGroup: 1000", f"runAsGroup: {os.getgid()}"))  # fmt: skip
        return path

    def volume_conf(self) -> dict[str, str]:
        conf = {}
        for role in ("driver", "executor"):
            prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.tables"
            conf[f"{prefix}.options.claimName"] = "sharelake-tables"
            conf[f"{prefix}.mount.path"] = str(self.tables)
        return conf

    def submit(
        self, deploy_mode: str, name: str, toml: str, log: Path, conf: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """`./spark-submit.sh --profile k8s` as docs/operations.md has a user run it."""
        conf = {**SMALL, **self.volume_conf(), **(conf or {}),
                "spark.kubernetes.container.image": IMAGE,
                "spark.kubernetes.namespace": NAMESPACE,
                "spark.kubernetes.authenticate.driver.serviceAccountName": "spark",
                "spark.app.name": name}  # fmt: skip
        args = [str(ROOT / "spark-submit.sh"), "--profile", "k8s", "--master", f"k8s://{self.cluster.server}",
                "--deploy-mode", deploy_mode]  # fmt: skip
        if deploy_mode == "cluster":
            self.config_map(name, toml)
            conf |= {
                "spark.kubernetes.driver.podTemplateFile": str(self.driver_template(name)),
                "spark.kubernetes.driver.pod.name": f"{name}-driver",
            }
            config = "/etc/sharelake/job.toml"
        else:
            conf |= {
                "spark.driver.host": pod_network.NODE_IP,
                "spark.kubernetes.executor.podNamePrefix": name,
                "spark.kubernetes.executor.podTemplateFile": str(self.executor_template()),
            }
            config_file = self.templates / f"{name}.toml"
            config_file.write_text(toml)
            config = str(config_file)
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        args += [str(ROOT / "jobs" / "main.py"), "ingest", "--config", config]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"KUBECONFIG": str(self.cluster.kubeconfig)}
        with log.open("wb") as out:
            return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def pod_log(self, pod: str) -> str:
        return self.kubectl("logs", pod, check=False)

    def pod(self, name: str) -> dict[str, Any]:
        out = self.kubectl("get", "pod", name, "-o", "json", check=False)
        return json.loads(out) if out else {}

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(self.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
        return items

    def exit_code(self, pod: str) -> int | None:
        statuses = self.pod(pod).get("status", {}).get("containerStatuses", [])
        terminated = statuses[0].get("state", {}).get("terminated") if statuses else None
        return None if terminated is None else int(terminated["exitCode"])


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    cluster = k8s_cluster.K8sCluster().start()
    try:
        cluster.load_image(IMAGE)
        cluster.apply((EXAMPLES / "rbac.yaml").read_text())
        tables = tmp_path_factory.mktemp("k8s-tables")
        tables.chmod(0o777)
        cluster.apply(TABLES_VOLUME.format(path=tables, namespace=NAMESPACE))
        yield Kube(cluster, tables, tmp_path_factory.mktemp("k8s-submit"))
    finally:
        cluster.stop()


# the tables' volume: a PersistentVolume on the node's folder, claimed in the job's namespace (on a
# real cluster: NFS, a CSI driver's ReadWriteMany class, or the tables on HDFS, ADLS, GCS)
TABLES_VOLUME = """apiVersion: v1
kind: PersistentVolume
metadata: {{name: sharelake-tables}}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteMany]
  storageClassName: ""
  persistentVolumeReclaimPolicy: Retain
  hostPath: {{path: {path}, type: Directory}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: sharelake-tables, namespace: {namespace}}}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: sharelake-tables
  resources: {{requests: {{storage: 10Gi}}}}
"""


@pytest.fixture(scope="module")
def pod_broker(tmp_path_factory: pytest.TempPathFactory, kube: Kube) -> Iterator[EmbeddedKafka]:
    """A broker on this machine's address on the pod network (the bridge exists once the cluster is up)."""
    with EmbeddedKafka(tmp_path_factory.mktemp("k8s-broker"), host=NodeHost()) as broker:
        yield broker


def job_toml(broker: EmbeddedKafka, topic: str, table: Path, **sections: dict[str, Any]) -> str:
    """The job's config file: the broker, topic, group and table, until drained; `sections` add keys
    (`kafka={"record_lock_duration_ms": 15000}`, `pump={...}`)."""
    settings: dict[str, dict[str, Any]] = {
        "kafka": {"bootstrap_servers": broker.bootstrap, "topic": topic, "group_id": f"g-{topic}"},
        "delta": {"table_path": str(table)},
        "run": {"mode": "until-drained", "idle_timeout_ms": 6000},
    }
    for section, keys in sections.items():
        settings[section] = settings.get(section, {}) | keys
    return "".join(
        f"[{section}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
        for section, keys in settings.items()
    )


# small batches, so a kill strikes between commits with records polled and locked in between
SMALL_BATCHES: dict[str, dict[str, Any]] = {
    "kafka": {"record_lock_duration_ms": 15000},
    "pump": {"max_poll_records": 500},
    "batch": {"max_records": 2000, "micro_batch_max_ms": 0},
}


def backlog(kube: Kube, broker: EmbeddedKafka, topic: str, records: int) -> tuple[Path, list[Produced]]:
    broker.create_topic(topic, partitions=2)
    return kube.tables / topic, produce_json_events(broker.bootstrap, topic, records)


def finish(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        pytest.fail(f"spark-submit still running after {timeout_s:.0f}s:\n{log.read_text(errors='replace')[-4000:]}")


def first_commit(text: Callable[[], str], timeout_s: float, give_up: Callable[[], object]) -> None:
    wait_for(
        lambda: re.search(r"batch [1-9]\d*: in=", text()) is not None, timeout_s, interval_s=1.0, give_up=give_up,
        failure=lambda: f"no batch committed:\n{text()[-4000:]}",
    )  # fmt: skip


def test_a_backlog_lands_once_from_a_cluster_mode_driver_and_its_metrics_are_scraped(
    kube: Kube, pod_broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"k8s-cluster-{unique}"
    table, produced = backlog(kube, pod_broker, topic, 3000)
    name = f"sl-{unique}"[:40]
    toml = job_toml(pod_broker, topic, table, metrics={"prometheus_port": 9464})
    log = tmp_path / "submit.log"
    started, submitted_at = time.monotonic(), time.time()
    proc = kube.submit("cluster", name, toml, log, conf={"spark.kubernetes.submission.waitAppCompletion": "true"})
    driver = f"{name}-driver"
    endpoint = wait_for(
        lambda: metrics_url(kube.pod_log(driver)), 300, interval_s=1.0,
        give_up=lambda: proc.poll() is not None, failure=lambda: f"no metrics line:\n{kube.pod_log(driver)[-4000:]}",
    )  # fmt: skip
    # the address the driver's line names is its pod's, reachable from this node
    with urllib.request.urlopen(endpoint, timeout=10) as scraped:
        assert b"sharelake_accepted_total" in scraped.read()
    code = finish(proc, log, 400)
    elapsed = time.monotonic() - started
    output = kube.pod_log(driver)
    assert kube.exit_code(driver) == 0, output[-4000:]
    assert code == 0, log.read_text(errors="replace")[-3000:]
    assert "Traceback" not in output, output[-4000:]
    assert_exactly_once(spark, table, produced)
    assert nothing_left(pod_broker, topic, f"g-{topic}")
    # what an operator asks from outside the cluster: the group's members and lag, the table's last commit
    (tmp_path / "job.toml").write_text(toml)
    status = subprocess.run([str(VENV_BIN / "sharelake"), "status", "--config", str(tmp_path / "job.toml"), "--json"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert status.returncode == 0, status.stderr
    print(f"k8s status: {status.stdout.strip()[:600]}")
    first_commit_s = data_commits(read_commits(table))[0].timestamp_ms / 1000 - submitted_at
    print(f"k8s cluster mode: {len(produced)} records, submit to first commit {first_commit_s:.1f}s, to the driver's "
          f"end {elapsed:.1f}s; {run_summary_line(output)}")  # fmt: skip


def metrics_url(text: str) -> str:
    found = re.search(r"Prometheus metrics on (http://\S+/metrics)", text)
    return found[1] if found else ""


def run_summary_line(text: str) -> str:
    found = re.findall(r"run ended: .*", text)
    return found[-1] if found else "(no run ended line)"


@pytest.mark.long
def test_a_backlog_lands_once_from_a_client_mode_driver_with_executor_pods(
    kube: Kube, pod_broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    """The driver on this machine, its executors pods. `make chaos`; in CI a client-mode driver runs
    in the Job's pod (the force-kill test), with its executors as pods too."""
    topic = f"k8s-client-{unique}"
    table, produced = backlog(kube, pod_broker, topic, 3000)
    name = f"slc-{unique}"[:40]
    log = tmp_path / "client.log"
    started = time.monotonic()
    proc = kube.submit("client", name, job_toml(pod_broker, topic, table), log)
    # the driver here asks the API server for its executors: pods of the image, named after it
    executor = wait_for(
        lambda: executor_pods(kube, name), 180, interval_s=0.5, give_up=lambda: proc.poll() is not None,
        failure=lambda: f"no executor pod:\n{kube.kubectl('get', 'pods')}\n{log.read_text(errors='replace')[-3000:]}",
    )[0]  # fmt: skip
    code = finish(proc, log, 400)
    output = log.read_text(errors="replace")
    assert code == 0, output[-4000:]
    assert executor["spec"]["containers"][0]["image"] == IMAGE, executor["spec"]
    assert_exactly_once(spark, table, produced)
    assert nothing_left(pod_broker, topic, f"g-{topic}")
    print(f"k8s client mode: {len(produced)} records in {time.monotonic() - started:.1f}s; {run_summary(log)}")


def job_manifest(kube: Kube, example: str, name: str, config_map: str) -> str:
    """docs/examples/k8s/<example> as a user fills it in: this job's name, image, ConfigMap and tables."""
    text = (EXAMPLES / example).read_text()
    return (
        text.replace("name: sharelake-orders\n  namespace", f"name: {name}\n  namespace")
        .replace("app: sharelake-orders", f"app: {name}")
        .replace("spark.app.name=sharelake-orders", f"spark.app.name={name}")
        .replace("registry.example.com/sharelake:0.21.0", IMAGE)
        .replace("configMap: {name: sharelake-orders}", f"configMap: {{name: {config_map}}}")
        .replace("/data/tables", str(kube.tables))
    )


def executor_pods(kube: Kube, prefix: str) -> list[dict[str, Any]]:
    return [p for p in kube.pods("spark-role=executor") if p["metadata"]["name"].startswith(f"{prefix}-exec-")]


def job_pods(kube: Kube, name: str) -> list[dict[str, Any]]:
    return kube.pods(f"job-name={name}")


def running_pod(kube: Kube, name: str) -> str:
    pods = [p for p in job_pods(kube, name) if p["status"].get("phase") == "Running"]
    return str(pods[0]["metadata"]["name"]) if pods else ""


def test_the_driver_pod_force_killed_and_the_job_controller_restarts_it_lands_the_rest_once(
    kube: Kube, pod_broker: EmbeddedKafka, spark: SparkSession, unique: str
) -> None:
    topic = f"k8s-job-{unique}"
    table, produced = backlog(kube, pod_broker, topic, 10_000)
    name = f"slj-{unique}"[:40]
    kube.config_map(name, job_toml(pod_broker, topic, table, **SMALL_BATCHES))
    kube.cluster.apply(job_manifest(kube, "job.yaml", name, name))
    first = wait_for(lambda: running_pod(kube, name), 120, f"the Job {name} started no pod", interval_s=1.0)
    first_commit(lambda: kube.pod_log(first), 300, give_up=lambda: not running_pod(kube, name))
    before_kill = kube.pod_log(first)
    kube.kubectl("delete", "pod", first, "--grace-period=0", "--force")
    killed_at = time.monotonic()
    kube.kubectl("wait", "--for=condition=complete", f"job/{name}", "--timeout=600s")
    recovered_s = time.monotonic() - killed_at
    pods = job_pods(kube, name)
    (second,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != first]
    output = kube.pod_log(second)
    assert kube.exit_code(second) == 0, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    # the kill struck mid-backlog: the first driver had not ended, the second landed the rest
    assert "run ended" not in before_kill, before_kill[-3000:]
    assert int(run_summary_fields(output)["accepted"]) > 0, output[-3000:]
    assert_exactly_once(spark, table, produced)
    assert nothing_left(pod_broker, topic, f"g-{topic}")
    print(f"k8s driver force-killed, Job restarted it: {len(produced)} records, kill to Job complete "
          f"{recovered_s:.0f}s; {run_summary_line(output)}")  # fmt: skip


def test_the_driver_pod_deleted_with_its_grace_period_drains_and_ends_without_a_trace(
    kube: Kube, pod_broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    """`kubectl delete pod` (SIGTERM, SIGKILL after terminationGracePeriodSeconds): the driver stops
    polling, finishes its round, ACCEPTs what it wrote and RELEASEs the rest, within the grace
    period; a second run lands what is left, each record once."""
    topic = f"k8s-grace-{unique}"
    table, produced = backlog(kube, pod_broker, topic, 10_000)
    name = f"slg-{unique}"[:40]
    log = tmp_path / "submit.log"
    proc = kube.submit("cluster", name, job_toml(pod_broker, topic, table, **SMALL_BATCHES), log)
    driver = f"{name}-driver"
    first_commit(lambda: kube.pod_log(driver), 300, give_up=lambda: proc.poll() is not None)
    deleted_at = time.monotonic()
    kube.kubectl("delete", "pod", driver, "--wait=false")
    wait_for(
        lambda: "run ended" in kube.pod_log(driver), 90, lambda: f"no run ended line:\n{kube.pod_log(driver)[-4000:]}"
    )
    output = kube.pod_log(driver)
    stopped_s = time.monotonic() - deleted_at
    finish(proc, log, 120)
    # spark-submit follows the driver pod to its end and names its container's exit code: the
    # contract's for a SIGTERM (143 from the JVM; 0 when the Python driver got it first)
    codes = re.findall(r"exit code: (\d+)", log.read_text(errors="replace"))
    assert codes and int(codes[-1]) in (0, 143), log.read_text(errors="replace")[-3000:]
    assert "Traceback" not in output, output[-4000:]
    assert re.search(r"received SIGTERM: draining|driver JVM is shutting down: draining first", output), output[-3000:]
    # a second run lands what is left (here, in this session's Spark: the table is on the shared volume)
    rest_log = tmp_path / "rest.log"
    assert drain_in_process(spark, JobSpec(pod_broker, topic, f"g-{topic}", table), rest_log) == 0
    # the delete struck mid-backlog: the second run had records left to land
    assert run_summary(rest_log)["accepted"] > 0, rest_log.read_text()[-3000:]
    assert_exactly_once(spark, table, produced)
    assert nothing_left(pod_broker, topic, f"g-{topic}")
    print(f"k8s driver deleted with grace: exit code {codes[-1]}, 'run ended' {stopped_s:.1f}s after the delete; "
          f"{run_summary_line(output)}")  # fmt: skip


@pytest.mark.long
def test_an_executor_pod_deleted_during_a_write_costs_a_retry_not_a_record(
    kube: Kube, pod_broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"k8s-exec-{unique}"
    table, produced = backlog(kube, pod_broker, topic, 30_000)
    name = f"sle-{unique}"[:40]
    log = tmp_path / "client.log"
    proc = kube.submit("client", name, job_toml(pod_broker, topic, table, **SMALL_BATCHES), log)
    first_commit(lambda: log.read_text(errors="replace"), 300, give_up=lambda: proc.poll() is not None)
    executors = executor_pods(kube, name)
    assert executors, kube.kubectl("get", "pods")
    victim = executors[0]["metadata"]["name"]
    kube.kubectl("delete", "pod", victim, "--grace-period=0", "--force")
    assert finish(proc, log, 600) == 0, log.read_text(errors="replace")[-4000:]
    assert_exactly_once(spark, table, produced)
    assert nothing_left(pod_broker, topic, f"g-{topic}")
    fields = run_summary(log)
    print(f"k8s executor pod {victim} deleted: {len(produced)} records; failed_attempts={fields['failed_attempts']} "
          f"max_cycle_s={fields['max_cycle_s']}")  # fmt: skip


@pytest.mark.long
def test_a_cronjob_drains_on_its_schedule_and_a_run_overlapping_it_lands_nothing_twice(
    kube: Kube, pod_broker: EmbeddedKafka, spark: SparkSession, unique: str
) -> None:
    topic = f"k8s-cron-{unique}"
    table, produced = backlog(kube, pod_broker, topic, 20_000)
    name = f"slcron-{unique}"[:40]
    kube.config_map(name, job_toml(pod_broker, topic, table, **SMALL_BATCHES))
    manifest = job_manifest(kube, "cronjob.yaml", name, name).replace(
        'schedule: "*/15 * * * *"', 'schedule: "* * * * *"'
    )
    kube.cluster.apply(manifest)
    scheduled = wait_for(lambda: running_pod_of_cron(kube, name), 150, "the CronJob started no run", interval_s=1.0)
    # a run by hand while the scheduled one runs: both members of the share group
    kube.kubectl("create", "job", f"{name}-byhand", f"--from=cronjob/{name}")
    for job in (scheduled, f"{name}-byhand"):
        kube.kubectl("wait", "--for=condition=complete", f"job/{job}", "--timeout=600s")
    kube.kubectl("patch", "cronjob", name, "-p", '{"spec": {"suspend": true}}')
    jobs = json.loads(kube.kubectl("get", "jobs", "-o", "json"))["items"]
    ours = [j["metadata"]["name"] for j in jobs if j["metadata"]["name"].startswith(name)]
    logs = {j: kube.kubectl("logs", f"job/{j}", check=False) for j in ours}
    accepted = {j: int(run_summary_fields(text).get("accepted", 0)) for j, text in logs.items()}
    assert_exactly_once(spark, table, produced)
    assert nothing_left(pod_broker, topic, f"g-{topic}")
    print(f"k8s CronJob (Forbid) and a run by hand on one group: {len(produced)} records, accepted per run {accepted}")


def running_pod_of_cron(kube: Kube, cron: str) -> str:
    jobs = json.loads(kube.kubectl("get", "jobs", "-o", "json"))["items"]
    for job in jobs:
        owners = job["metadata"].get("ownerReferences", [])
        if any(o.get("name") == cron for o in owners) and running_pod(kube, job["metadata"]["name"]):
            return str(job["metadata"]["name"])
    return ""


def run_summary_fields(text: str) -> dict[str, str]:
    line = run_summary_line(text)
    return dict(re.findall(r"(\w+)=([\d.]+)", line))


@pytest.fixture(scope="module")
def airflow_k8s(tmp_path_factory: pytest.TempPathFactory, kube: Kube) -> AirflowHome:
    """An Airflow home running the docs' Kubernetes DAG against this cluster (the worker's kubeconfig)."""
    env = {"KUBECONFIG": str(kube.cluster.kubeconfig), "SHARELAKE_RETRIES": "1", "SHARELAKE_RETRY_DELAY_S": "1"}
    return airflow_home(tmp_path_factory.mktemp("airflow-k8s"), "sharelake_ingest_k8s", env)


@pytest.mark.long
def test_airflow_runs_the_kubernetes_job_and_records_its_success(
    kube: Kube, pod_broker: EmbeddedKafka, spark: SparkSession, airflow_k8s: AirflowHome, tmp_path: Path, unique: str
) -> None:
    """The docs' DAG file, its `sharelake_ingest_k8s` DAG: the Job of docs/examples/k8s/job.yaml, filled in
    as a user fills it in, run by Airflow's KubernetesJobOperator and waited for. `make chaos`; in CI the
    same DAG file's other DAG runs (tests/test_airflow.py) and the same Job runs (the force-kill test)."""
    topic = f"k8s-airflow-{unique}"
    table, produced = backlog(kube, pod_broker, topic, 3000)
    name = f"sla-{unique}"[:40]
    kube.config_map(name, job_toml(pod_broker, topic, table))
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_manifest(kube, "job.yaml", name, name))
    log = tmp_path / "airflow.log"
    before, t0 = airflow_k8s.run_ids(), time.monotonic()
    code, out = finish_airflow(airflow_k8s.dags_test({"job_template": str(job_file), "namespace": NAMESPACE}, log), log)
    took = time.monotonic() - t0
    assert code == 0, out[-5000:]
    run_id = the_new_run(airflow_k8s, before)
    assert airflow_k8s.tries(run_id) == [(1, "success")], out[-5000:]
    assert "run ended:" in out, out[-5000:]  # the driver's log, shown in the task's
    assert_exactly_once(spark, table, produced)
    assert nothing_left(pod_broker, topic, f"g-{topic}")
    print(f"airflow k8s job: airflow dags test {took:.1f}s, tries {airflow_k8s.tries(run_id)}")


@pytest.mark.long
def test_airflow_fails_the_kubernetes_job_of_a_bad_config_with_no_retry(
    kube: Kube, pod_broker: EmbeddedKafka, airflow_k8s: AirflowHome, tmp_path: Path, unique: str
) -> None:
    topic = f"k8s-airflow-bad-{unique}"
    pod_broker.create_topic(topic)
    name = f"slab-{unique}"[:40]
    kube.config_map(name, job_toml(pod_broker, topic, kube.tables / topic, pump={"members": "zero"}))
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_manifest(kube, "job.yaml", name, name))
    log = tmp_path / "airflow.log"
    before = airflow_k8s.run_ids()
    code, out = finish_airflow(airflow_k8s.dags_test({"job_template": str(job_file), "namespace": NAMESPACE}, log), log)
    assert code != 0, out[-5000:]
    run_id = the_new_run(airflow_k8s, before)
    assert airflow_k8s.task(run_id) == ("failed", 1, 1), out[-5000:]  # a retry was allowed, none was made
    assert "the driver exited 2" in out, out[-5000:]
    jobs = [
        j for j in json.loads(kube.kubectl("get", "jobs", "-o", "json"))["items"] if name in j["metadata"]["name"]
    ]  # fmt: skip  (the operator names it job-<name>-<suffix>)
    assert len(jobs) == 1 and jobs[0]["status"].get("failed", 0) == 1, jobs  # one pod: the Job retried nothing
