"""What the scheduled-job definitions in docs/operations.md hold, checked offline.

A Databricks job (a Python wheel task) cannot run here; what it would run can be checked: the JSON
is a job definition of the documented shape, the wheel's entry point is the `sharelake` console
script, which ends the process with the run's exit code, and its parameters parse as `sharelake
ingest`'s. The Airflow DAG (docs/examples/airflow/sharelake_dag.py) runs for real in
tests/test_airflow.py, on a local Spark; here, without Airflow, its command line with its default
params (a YARN cluster's) builds the spark-submit command it would run (`--dry-run`), its exit code
for a bad config is the command's, and the docs show the file's own code. The exit codes the
scheduler table names are the ones the command returns.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import tomllib

import pytest

from sharelake import cli
from tests.job_runner import ROOT

OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
SECTION = OPERATIONS[OPERATIONS.index("### Scheduled on Databricks") :]
DAG_FILE = ROOT / "docs" / "examples" / "airflow" / "sharelake_dag.py"  # run for real by tests/test_airflow.py


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
    assert scripts[wheel_task["entry_point"]] == "sharelake.cli:exit_with_code"
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
    tree = ast.parse(DAG_FILE.read_text())
    (job,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SharelakeJob"]
    assert [ast.unparse(base) for base in job.bases] == ["BashOperator"]
    task = keywords(called(tree, "SharelakeJob"))
    assert ast.literal_eval(task["skip_on_exit_code"]) is None  # no exit code skips the task
    assert {"retries", "retry_delay", "execution_timeout"} <= task.keys()
    # the command with the params' defaults (a YARN cluster's), through the environment the task gives it
    defaults = {name: param_default(param) for name, param in literal_keys(keywords(called(tree, "DAG"))["params"])}
    env = {
        name: re.sub(r"\{\{ params\.(\w+) \}\}", lambda m: defaults[m[1]], ast.literal_eval(value))
        for name, value in literal_keys(task["env"])
    }
    bash_command = ast.literal_eval(task["bash_command"])
    command = [re.sub(r"\$(\w+)", lambda m: env[m[1]], arg) for arg in shlex.split(bash_command)]
    assert command[0] == "./spark-submit.sh" and "ingest" in command and "run.mode=until-drained" in command
    at = command.index("jobs/main.py")
    dry = subprocess.run(
        [str(ROOT / "spark-submit.sh"), *command[1:at], "--dry-run", *command[at:]],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ, **env},
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    built = dry.stdout.split()
    assert built[built.index("--deploy-mode") + 1] == "cluster"
    assert built[built.index("--files") + 1] == "conf/orders.toml" and "orders.toml" in built


def test_the_dag_fails_without_retry_on_the_commands_config_exit_code() -> None:
    tree = ast.parse(DAG_FILE.read_text())
    (code,) = [
        n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n).startswith("CONFIG_ERROR_EXIT =")
    ]
    assert ast.literal_eval(code) == cli.CONFIG_ERROR_EXIT


def test_the_docs_show_the_dags_own_code() -> None:
    shown = block("python")
    assert "class SharelakeJob(BashOperator):" in shown and "SharelakeJob(" in shown
    assert shown in DAG_FILE.read_text(), "the scheduled-jobs section's python block is not the DAG file's code"


def called(tree: ast.Module, name: str, dag_id: str = "sharelake_ingest") -> ast.Call:
    """The one call of `name` in the DAG file (`DAG`: the one of `dag_id`; the file's other DAG is the
    Kubernetes one, run by tests/test_kubernetes.py)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == name]
    if name == "DAG":
        calls = [c for c in calls if ast.literal_eval(keywords(c)["dag_id"]) == dag_id]
    (call,) = calls
    return call


def keywords(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg is not None}


def literal_keys(node: ast.expr) -> list[tuple[str, ast.expr]]:
    """A dict display's items, its keys literal strings."""
    assert isinstance(node, ast.Dict)
    return [(ast.literal_eval(k), v) for k, v in zip(node.keys, node.values, strict=True) if k is not None]


def param_default(param: ast.expr) -> str:
    """A `Param(...)`'s default: its literal, or the fallback of its `os.environ.get(NAME, fallback)`."""
    assert isinstance(param, ast.Call) and getattr(param.func, "id", "") == "Param"
    default = param.args[0]
    return str(ast.literal_eval(default.args[1] if isinstance(default, ast.Call) else default))


def test_the_exit_codes_a_scheduler_reads_are_the_commands() -> None:
    table = OPERATIONS[OPERATIONS.index("**What a scheduler reads**") :].split("\n\n")[1]
    named = set(re.findall(r"^\| `(\d+)`", table, re.M)) | set(re.findall(r"^\| `\d+` / `(\d+)`", table, re.M))
    assert {"0", "1", "2", "3", "143", "130"} <= named, named
    assert (cli.CONFIG_ERROR_EXIT, cli.DEPENDENCY_OUTAGE_EXIT) == (2, 3)
