"""Sharelake's ingest job as Airflow 3 DAGs: every 15 minutes, drain the share group into its Delta table.

Two DAGs, one per way the job is deployed: `sharelake_ingest` runs `./spark-submit.sh` on the worker
(YARN, standalone, Kubernetes from outside, local), `sharelake_ingest_k8s` runs the Kubernetes Job of
docs/examples/k8s/job.yaml (its pod is the driver; a lost driver pod is replaced by the Job controller).

Copy this file into your DAGs folder. The task runs Sharelake's `./spark-submit.sh` (it adds the Delta jars,
the profile's Spark properties and the Python environment, and in cluster mode ships the config file) in a
Sharelake checkout or unpacked release on the worker, with `run.mode=until-drained`: the job lands what the
topic holds and exits 0. What a non-zero exit does to the task (docs/operations.md, "What a scheduler reads"):

  2  bad configuration (its `sharelake:` line names the key and the fix): the task fails at once, no retry,
     since a retry would fail the same way
  3  a dependency (broker, registry, S3) still down after run.dependency_wait_s: retried after retry_delay
  1  the run failed (nothing undecided was ACCEPTed, the next run resumes): retried
  143 after execution_timeout: Airflow sends SIGTERM to the job's process group, the job drains gracefully
     within run.stop_timeout_s (Airflow does not wait for it); the try counts as failed and is retried

Where it runs and on what comes from the DAG's params (a manual run may override them), their defaults from
the worker's environment. Secrets stay out of the command line: the config names them (`env:KAFKA_PASSWORD`)
and the job reads them from the worker's environment, which the task inherits (as HADOOP_CONF_DIR for YARN).
The retry settings are read when the DAG file is parsed (operator arguments are fixed then, params only when a
task runs). tests/test_airflow.py runs this very file with `airflow dags test` against a real broker.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Context, Param
from airflow.sdk.exceptions import AirflowException, AirflowFailException

CONFIG_ERROR_EXIT = 2  # Sharelake's exit code for a bad configuration (sharelake.cli.CONFIG_ERROR_EXIT)
RETRIES = int(os.environ.get("SHARELAKE_RETRIES", "3"))
RETRY_DELAY = timedelta(seconds=float(os.environ.get("SHARELAKE_RETRY_DELAY_S", "300")))
EXECUTION_TIMEOUT = timedelta(seconds=float(os.environ.get("SHARELAKE_EXECUTION_TIMEOUT_S", "3600")))


class SharelakeJob(BashOperator):
    """A BashOperator whose exit 2 (bad configuration) fails the task with no retry: AirflowFailException."""

    def execute(self, context: Context) -> Any:
        try:
            return super().execute(context)
        except AirflowException as failed:
            job = self.subprocess_hook.sub_process
            if job is not None and job.returncode == CONFIG_ERROR_EXIT:
                raise AirflowFailException(
                    "sharelake exited 2: bad configuration (the `sharelake:` line above names the key and the fix); "
                    "not retried: a retry would fail the same way"
                ) from failed
            raise


with DAG(
    dag_id="sharelake_ingest",
    schedule="*/15 * * * *",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,  # an overlapping run would be safe (a second member of the group), only wasteful
    params={
        "checkout": Param(os.environ.get("SHARELAKE_HOME", "/opt/sharelake"), type="string"),
        "config": Param(os.environ.get("SHARELAKE_CONFIG", "conf/orders.toml"), type="string"),
        "profile": Param(os.environ.get("SHARELAKE_PROFILE", "yarn"), enum=["local", "standalone", "yarn", "k8s"]),
        "deploy_mode": Param(os.environ.get("SHARELAKE_DEPLOY_MODE", "cluster"), enum=["client", "cluster"]),
        "master": Param(os.environ.get("SPARK_MASTER", ""), type="string"),  # empty: the profile's default
    },
):
    SharelakeJob(
        task_id="ingest",
        cwd="{{ params.checkout }}",
        # the params reach the command as environment variables, never pasted into it (no shell injection)
        bash_command=(
            './spark-submit.sh --profile "$SHARELAKE_PROFILE" --deploy-mode "$SHARELAKE_DEPLOY_MODE" '
            'jobs/main.py ingest --config "$SHARELAKE_CONFIG" --set run.mode=until-drained'
        ),
        env={
            "SHARELAKE_PROFILE": "{{ params.profile }}",
            "SHARELAKE_DEPLOY_MODE": "{{ params.deploy_mode }}",
            "SHARELAKE_CONFIG": "{{ params.config }}",
            "SPARK_MASTER": "{{ params.master }}",
        },
        append_env=True,  # and the worker's environment: the secrets the config reads, HADOOP_CONF_DIR, ...
        skip_on_exit_code=None,  # every non-zero exit is a failure (BashOperator skips on 99 by default)
        retries=RETRIES,
        retry_delay=RETRY_DELAY,
        execution_timeout=EXECUTION_TIMEOUT,
    )


class SharelakeKubernetesJob(KubernetesJobOperator):
    """The Job of docs/examples/k8s/job.yaml, waited for; a Job its podFailurePolicy failed (the driver
    exited 2: a bad configuration) fails the task with no retry."""

    def execute(self, context: Context) -> Any:
        try:
            return super().execute(context)
        except AirflowException as failed:
            conditions = (self.job.status.conditions or []) if self.job is not None and self.job.status else []
            if any(c.type == "Failed" and c.reason == "PodFailurePolicy" for c in conditions):
                raise AirflowFailException(
                    "the driver exited 2: bad configuration (its `sharelake:` line names the key and the fix); "
                    "not retried: a retry would fail the same way"
                ) from failed
            raise


with DAG(
    dag_id="sharelake_ingest_k8s",
    schedule="*/15 * * * *",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    params={
        # the Job's manifest (image, ConfigMap, tables' claim filled in) and where it runs; the cluster is
        # the worker's kubeconfig (KUBECONFIG) or, with no kubeconfig, the one the worker runs in
        "job_template": Param(os.environ.get("SHARELAKE_K8S_JOB", "/opt/sharelake/k8s/job.yaml"), type="string"),
        "namespace": Param(os.environ.get("SHARELAKE_K8S_NAMESPACE", "sharelake"), type="string"),
    },
):
    SharelakeKubernetesJob(
        task_id="ingest",
        job_template_file="{{ params.job_template }}",
        namespace="{{ params.namespace }}",
        base_container_name="driver",  # the template's container: the driver, whose log the task shows
        wait_until_job_complete=True,
        get_logs=True,
        random_name_suffix=True,  # each run a Job of its own
        retries=RETRIES,
        retry_delay=RETRY_DELAY,
        execution_timeout=EXECUTION_TIMEOUT,
    )
