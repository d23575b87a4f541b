"""The Airflow DAG of the docs (docs/examples/airflow/sharelake_dag.py), run for real with `airflow dags test`.

Airflow 3 from a venv of its own (`make airflow-env`), one Airflow home for the module (a SQLite metadata
DB, no scheduler, no API server): `airflow dags test` parses that very file in place and runs its task,
which runs `./spark-submit.sh ... jobs/main.py ingest` from this checkout against the session's broker,
into a real Delta table. The DAG's params point it at the test's config (`--conf`); the retry delay is made
short through the environment the DAG file is parsed in. What Airflow recorded is read back from its
metadata DB (each try's state), not only the command's exit code:

- a drain: the task succeeds on its first try; every record once in the table, the group left empty
  (a sentinel);
- a bad config (exit 2): the task fails on its first try and is not retried, with retries left;
- the broker's address not answering at the first try (exit 3): the task is up for retry; the address
  opens (a relay to the broker) before the second try, which drains.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.sample_data import Produced, produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.airflow_home import RUN_TIMEOUT_S, AirflowHome, airflow_home, finish, the_new_run
from tests.job_runner import ROOT, kill_job
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once
from tests.tcp_relay import TcpRelay
from tests.waiting import wait_for

DAG_ID = "sharelake_ingest"
RETRIES = 2


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> AirflowHome:
    # read where the DAG file is parsed: a retry a second after a failed try
    retry_soon = {"SHARELAKE_RETRIES": str(RETRIES), "SHARELAKE_RETRY_DELAY_S": "1"}
    return airflow_home(tmp_path_factory.mktemp("airflow-home"), DAG_ID, retry_soon)


def write_config(path: Path, bootstrap: str, topic: str, group: str, table: Path, more: str = "") -> Path:
    """A job config as a user writes one (the README's), with a short idle time and dependency wait."""
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\ntopic = "{topic}"\ngroup_id = "{group}"\n\n'
        f'[delta]\ntable_path = "{table}"\n\n'
        "[run]\nidle_timeout_ms = 3000\ndependency_wait_s = 5\n" + more
    )
    return path


def params(config: Path) -> dict[str, str]:
    """The DAG's params for a local run of this checkout (its defaults are a YARN cluster's)."""
    return {"checkout": str(ROOT), "config": str(config), "profile": "local", "deploy_mode": "client",
            "master": "local[2]"}  # fmt: skip


def events_topic(broker: EmbeddedKafka) -> tuple[str, list[Produced]]:
    """A new 2-partition topic holding 300 events (its group is `g-<topic>`)."""
    name = f"airflow-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, partitions=2)
    return name, produce_json_events(broker.bootstrap, name, 300)


@pytest.mark.long
def test_a_drain_succeeds_on_its_first_try(
    airflow: AirflowHome, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path
) -> None:
    """`make chaos`; in CI the retried run below drains the same way on its second try."""
    name, produced = events_topic(broker)
    table = tmp_path / "events"
    config = write_config(tmp_path / "job.toml", broker.bootstrap, name, f"g-{name}", table)
    before, t0 = airflow.run_ids(), time.monotonic()
    code, out = finish(airflow.dags_test(params(config), tmp_path / "airflow.log"), tmp_path / "airflow.log")
    took = time.monotonic() - t0
    assert code == 0, out[-5000:]
    run_id = the_new_run(airflow, before)
    assert airflow.tries(run_id) == [(1, "success")], out[-5000:]
    assert "run ended:" in out and "Command exited with return code 0" in out
    assert_exactly_once(spark, table, produced)
    assert nothing_left(broker, name, f"g-{name}")
    print(f"drain: airflow dags test {took:.1f}s, tries {airflow.tries(run_id)}")


def test_a_bad_config_fails_the_task_with_no_retry(airflow: AirflowHome, broker: EmbeddedKafka, tmp_path: Path) -> None:
    name = f"airflow-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name)
    config = write_config(tmp_path / "job.toml", broker.bootstrap, name, f"g-{name}", tmp_path / "t",
                          '\n[pump]\nmembers = "zero"\n')  # fmt: skip
    before, t0 = airflow.run_ids(), time.monotonic()
    code, out = finish(airflow.dags_test(params(config), tmp_path / "airflow.log"), tmp_path / "airflow.log")
    took = time.monotonic() - t0
    assert code != 0 and "DagRun failed" in out, out[-5000:]
    run_id = the_new_run(airflow, before)
    # failed on the first try although RETRIES more were allowed: never up for retry
    assert airflow.task(run_id) == ("failed", 1, RETRIES), out[-5000:]
    assert airflow.tries(run_id) == [(1, "failed")]
    assert "sharelake: config key pump.members = 'zero'" in out  # the job's one line, in the task's log
    assert "Command exited with return code 2" in out and "AirflowFailException: sharelake exited 2" in out
    assert not (tmp_path / "t").exists()
    print(f"bad config: airflow dags test {took:.1f}s, tries {airflow.tries(run_id)}")


def test_a_broker_down_at_start_exits_3_and_the_retry_drains(
    airflow: AirflowHome, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path
) -> None:
    name, produced = events_topic(broker)
    table = tmp_path / "events"
    relay = TcpRelay(broker.bootstrap)  # the job's broker address: nothing listens there until opened
    config = write_config(tmp_path / "job.toml", relay.address, name, f"g-{name}", table)
    log = tmp_path / "airflow.log"
    before, t0 = airflow.run_ids(), time.monotonic()
    proc = airflow.dags_test(params(config), log)
    try:

        def first_try_over() -> bool:
            runs = airflow.run_ids() - before
            task = airflow.task(runs.pop()) if runs else None
            return task is not None and task[:2] == ("up_for_retry", 1)

        def never() -> str:
            return f"the first try never went up for retry:\n{log.read_text()[-4000:]}"

        wait_for(first_try_over, RUN_TIMEOUT_S, never, give_up=lambda: proc.poll() is not None)
        retried_after = time.monotonic() - t0
        relay.open()
        code, out = finish(proc, log)
    finally:
        relay.close()
        kill_job(proc)  # when the wait above failed
    took = time.monotonic() - t0
    assert code == 0, out[-5000:]
    run_id = the_new_run(airflow, before)
    # the first try was seen up for retry (above), then archived as failed when the second began
    assert airflow.tries(run_id) == [(1, "failed"), (2, "success")], out[-5000:]
    assert "Command exited with return code 3" in out and "still down after run.dependency_wait_s = 5s" in out
    assert "Command exited with return code 0" in out
    assert_exactly_once(spark, table, produced)
    assert nothing_left(broker, name, f"g-{name}")
    print(f"broker down at start: first try up for retry after {retried_after:.1f}s, airflow dags test {took:.1f}s, "
          f"tries {airflow.tries(run_id)}")  # fmt: skip
