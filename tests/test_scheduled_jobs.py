"""What the scheduled-job definitions in docs/operations.md hold, checked offline.

A Databricks job (a Python wheel task) and an Airflow task cannot run here; what they would run
can be checked: the JSON is a job definition of the documented shape, the wheel's entry point is
the `sharelake` console script, which ends the process with the run's exit code, and its
parameters parse as `sharelake ingest`'s; the Airflow task's command line builds the spark-submit
command it would run (`--dry-run`); the exit codes the scheduler table names are the ones the
command returns.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import tomllib

import pytest

from app import cli
from tests.job_runner import ROOT

OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
SECTION = OPERATIONS[OPERATIONS.index("### Scheduled on Databricks") :]


def block(language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", SECTION, re.S)
    assert found, f"no {language} block in the scheduled-jobs section"
    return found[1]


def test_the_databricks_job_runs_the_wheels_entry_point_with_ingest_arguments() -> None:
    job = json.loads(block("json"))
    (task,) = job["tasks"]
    wheel_task = task["python_wheel_task"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert wheel_task["package_name"] == "sharelake" and wheel_task["entry_point"] in scripts
    assert scripts[wheel_task["entry_point"]] == "app.cli:exit_with_code"
    args = cli.parser().parse_args(wheel_task["parameters"])
    assert args.command == "ingest" and args.config.endswith(".toml")
    assert any(lib["whl"].endswith("-py3-none-any.whl") for lib in task["libraries"])
    (cluster,) = job["job_clusters"]
    # Spark Connect (standard or shared access) would run foreachBatch away from the driver's consumers
    assert cluster["new_cluster"]["data_security_mode"] == "SINGLE_USER"
    assert task["job_cluster_key"] == cluster["job_cluster_key"]


def test_the_entry_point_ends_the_process_with_the_runs_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel task calls the entry point as a function: the code must travel as SystemExit."""
    monkeypatch.setattr(cli, "main", lambda argv=None: cli.CONFIG_ERROR_EXIT)
    with pytest.raises(SystemExit) as ended:
        cli.exit_with_code(["ingest", "--config", "x.toml"])
    assert ended.value.code == 2


def test_the_airflow_task_submits_a_command_spark_submit_builds() -> None:
    tree = ast.parse(block("python"))
    (call,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "BashOperator"]
    keywords = {k.arg: k.value for k in call.keywords}
    command = shlex.split(ast.literal_eval(keywords["bash_command"]))
    assert command[0] == "./spark-submit.sh" and "ingest" in command
    at = command.index("jobs/sharelake.py")
    dry = subprocess.run(
        [str(ROOT / "spark-submit.sh"), *command[1:at], "--dry-run", *command[at:]],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    built = dry.stdout.split()
    assert built[built.index("--deploy-mode") + 1] == "cluster"
    assert built[built.index("--files") + 1] == "conf/orders.toml" and "orders.toml" in built


def test_the_exit_codes_a_scheduler_reads_are_the_commands() -> None:
    table = OPERATIONS[OPERATIONS.index("**What a scheduler reads**") :].split("\n\n")[1]
    named = set(re.findall(r"^\| `(\d+)`", table, re.M)) | set(re.findall(r"^\| `\d+` / `(\d+)`", table, re.M))
    assert {"0", "1", "2", "3", "143", "130"} <= named, named
    assert (cli.CONFIG_ERROR_EXIT, cli.DEPENDENCY_OUTAGE_EXIT) == (2, 3)
