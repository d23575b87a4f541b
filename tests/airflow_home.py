"""An Airflow home for running the docs' DAG file (docs/examples/airflow/sharelake_dag.py) for real:
`airflow dags test` from Airflow's venv (`make airflow-env`), a SQLite metadata DB, no scheduler, and
what Airflow recorded of each run read back from that DB."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from devkit.paths import CACHE_DIR
from tests.job_runner import ROOT, kill_job

DAG_FILE = ROOT / "docs" / "examples" / "airflow" / "sharelake_dag.py"
AIRFLOW = CACHE_DIR / "airflow-env" / "bin" / "airflow"  # `make airflow-env`
RETRIES = 2
RUN_TIMEOUT_S = 600


@dataclass
class AirflowHome:
    """One Airflow home: its environment (the DAGs folder is the docs' example folder), its metadata DB,
    and the DAG of the file it runs."""

    home: Path
    env: dict[str, str]
    dag_id: str

    @property
    def db(self) -> Path:
        return self.home / "airflow.db"

    def dags_test(self, params: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        """`airflow dags test` of the DAG, with `params` as the run's conf (paths only, no secret)."""
        with log.open("wb") as out:
            return subprocess.Popen(
                [str(AIRFLOW), "dags", "test", self.dag_id, "--conf", json.dumps(params)],
                stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.home, start_new_session=True,
            )  # fmt: skip

    def query(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30) as db:
            return db.execute(sql, args).fetchall()

    def run_ids(self) -> set[str]:
        return {str(r[0]) for r in self.query("SELECT run_id FROM dag_run WHERE dag_id = ?", self.dag_id)}

    def task(self, run_id: str) -> tuple[str, int, int] | None:
        """The ingest task instance's state, try number and max tries, as Airflow recorded them (None: none yet)."""
        rows = self.query(
            "SELECT state, try_number, max_tries FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
            self.dag_id, run_id, "ingest",
        )  # fmt: skip
        return (str(rows[0][0]), int(str(rows[0][1])), int(str(rows[0][2]))) if rows else None

    def tries(self, run_id: str) -> list[tuple[int, str]]:
        """Every try of the task, (try number, state): the earlier ones as Airflow archived them in
        task_instance_history (a try that went up for retry is archived as failed), then the current one."""
        earlier = self.query(
            "SELECT try_number, state FROM task_instance_history WHERE dag_id = ? AND run_id = ? ORDER BY try_number",
            self.dag_id, run_id,
        )  # fmt: skip
        task = self.task(run_id)
        assert task is not None, f"no task instance in run {run_id}"
        return [(int(str(n)), str(s)) for n, s in earlier] + [(task[1], task[0])]


def airflow_home(home: Path, dag_id: str, env: dict[str, str]) -> AirflowHome:
    """A new Airflow home in `home` running `dag_id`, its DB migrated; `env` adds to its environment."""
    assert AIRFLOW.exists(), f"no Airflow at {AIRFLOW}: run `make airflow-env`"
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    base |= {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "PYTHONDONTWRITEBYTECODE": "1",  # nothing written beside the docs' DAG file
    }
    t0 = time.monotonic()
    done = subprocess.run([str(AIRFLOW), "db", "migrate"], env=base | env, cwd=home, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    print(f"airflow db migrate: {time.monotonic() - t0:.1f}s")
    return AirflowHome(home, base | env, dag_id)


def finish(proc: subprocess.Popen[bytes], log: Path) -> tuple[int, str]:
    """`airflow dags test`'s exit code and output, once it ended."""
    try:
        code = proc.wait(RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_job(proc)
        pytest.fail(f"airflow dags test still running after {RUN_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")
    return code, log.read_text(errors="replace")


def the_new_run(airflow: AirflowHome, before: set[str]) -> str:
    (run_id,) = airflow.run_ids() - before
    return run_id
