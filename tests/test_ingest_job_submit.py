"""The two ways a user starts a job, and every way `spark-submit.sh` refuses one.

`./spark-submit.sh jobs/sharelake.py ingest` from the checkout, and the `sharelake` command installed
from the wheel (the runtime venv: requirements.txt and the wheel only, what `pip install
sharelake-*.whl` gives) run outside the checkout, land the same records the same way and print the
same kinds of lines: Sharelake's Spark settings live in one place (app.spark_session) for both.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from app.spark_session import LOG4J_CONFIG, SHARELAKE_CONF, session_conf
from devkit.kafka_broker import EmbeddedKafka
from devkit.paths import CACHE_DIR
from devkit.sample_data import EVENT_SCHEMA, produce_json_events
from tests.table_checks import assert_offsets_once

ROOT = Path(__file__).resolve().parent.parent
SUBMIT = str(ROOT / "spark-submit.sh")
INSTALLED = CACHE_DIR / "runtime" / "bin" / "sharelake"  # `make runtime-env`: the wheel in a venv of its own
# a config as a user writes one for their own broker: the few keys that have no default, and a format
MINIMAL_CONFIG = """\
[kafka]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
group_id = "{group}"

[delta]
table_path = "{table}"

[payload]
format = "json"
schema = "{schema}"
"""
# a line of the job's Python logging, and one of Spark's (log4j, app/log4j2.properties)
PYTHON_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (?P<level>[A-Z]+) (?P<logger>[\w.]+):")
SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d [\d:]+ (?P<level>[A-Z]+) (?P<logger>[\w.$]+):")


def run(cmd: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 300) -> str:
    """Run `cmd`; its stdout and stderr as one text, as a terminal shows them (asserts exit 0)."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    output = done.stdout + done.stderr  # spark-submit forwards the Python driver's stderr to its stdout
    assert done.returncode == 0, output[-3000:]
    return output


def line_kinds(output: str, pattern: re.Pattern[str]) -> set[tuple[str, str]]:
    return {(m["level"], m["logger"]) for line in output.splitlines() if (m := pattern.match(line))}


def write_config(tmp_path: Path, broker: EmbeddedKafka, topic: str, name: str) -> tuple[Path, Path]:
    table = tmp_path / f"{name}-table"
    config = tmp_path / f"{name}.toml"
    schema = EVENT_SCHEMA.replace('"', '\\"')
    text = MINIMAL_CONFIG.format(bootstrap=broker.bootstrap, topic=topic, group=f"g-{name}", table=table, schema=schema)
    config.write_text(text)
    return config, table


def test_sharelake_settings_are_one_set_for_both_ways_of_starting() -> None:
    """Started from plain Python, the session gets every Sharelake setting and the driver's log4j
    config, which ships in the wheel; spark-submit.sh asks the same module for what it passes."""
    conf = session_conf({"spark.sql.shuffle.partitions": "7"})
    assert {k: v for k, v in conf.items() if k in SHARELAKE_CONF and k != "spark.sql.shuffle.partitions"} == {
        k: v for k, v in SHARELAKE_CONF.items() if k != "spark.sql.shuffle.partitions"
    }
    assert conf["spark.sql.shuffle.partitions"] == "7"  # the job's [spark_conf] wins
    assert conf["spark.ui.showConsoleProgress"] == "false"
    assert conf["spark.databricks.delta.snapshotPartitions"] == "4"
    assert str(LOG4J_CONFIG) in conf["spark.driver.extraJavaOptions"] and LOG4J_CONFIG.is_file()
    dry = run([SUBMIT, "--dry-run", "jobs/sharelake.py", "version"])
    assert f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}" in dry.replace("\\", "")


def test_installed_command_and_submitted_job_land_alike_and_print_alike(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    runs: dict[str, str] = {}
    took: dict[str, float] = {}
    for name in ("submitted", "installed"):
        topic = f"{name}-{unique}"
        broker.create_topic(topic, partitions=2)
        produced = produce_json_events(broker.bootstrap, topic, 2000)
        config, table = write_config(tmp_path, broker, topic, f"{name}-{unique}")
        args = ["ingest", "--config", str(config), "--set", "run.mode=until-drained", "--summary"]
        t0 = time.monotonic()
        if name == "submitted":
            runs[name] = run([SUBMIT, str(ROOT / "jobs" / "sharelake.py"), *args])
        else:
            # as a user runs it: outside the checkout, the wheel's own Python for the workers too
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
            runs[name] = run([str(INSTALLED), *args], env=env, cwd=tmp_path)
            assert f"starting (from {INSTALLED.parent.parent}/lib/python3.11/site-packages/app)" in runs[name]
        took[name] = time.monotonic() - t0
        assert_offsets_once(spark, table, produced)
        assert "duplicates: 0" in runs[name], runs[name][-3000:]
    print(f"wall time: submitted {took['submitted']:.1f}s, installed {took['installed']:.1f}s")
    for name, output in runs.items():
        assert "[Stage" not in output, f"{name}: Spark's console progress bar in the job's output"
        assert "Failed to cancel job group" not in output, f"{name}: a DAGScheduler warning at the end"
        assert "ShutdownHook" not in output, f"{name}: the JVM drain hook ran into a finished driver"
    # the same kinds of lines: the job's own, and no Spark line the submitted job does not print too
    # (the only exception: a note that the UI port was taken, by whatever else runs on the machine)
    assert line_kinds(runs["installed"], PYTHON_LINE) == line_kinds(runs["submitted"], PYTHON_LINE)
    spark_lines = line_kinds(runs["installed"], SPARK_LINE) - line_kinds(runs["submitted"], SPARK_LINE)
    assert spark_lines <= {("WARN", "Utils")}, f"Spark lines only the installed command prints: {spark_lines}"


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    done = submit_refused("--set", "pump.members=zero", "--set", f"delta.table_path={tmp_path}")
    assert done == (
        "sharelake: config key pump.members = 'zero': Input should be a valid integer, "
        "unable to parse string as an integer; fix the value (see conf/local.toml)"
    )


def submit_refused(*args: str, options: tuple[str, ...] = (), env: Mapping[str, str] | None = None) -> str:
    """Submit the ingest job with conf/local.toml; assert exit 2 with one `sharelake:` line, last; that line."""
    cmd = [
        SUBMIT,
        *options,
        str(ROOT / "jobs" / "sharelake.py"),
        "ingest",
        "--config",
        str(ROOT / "conf" / "local.toml"),
    ]
    # one pipe for both streams, so the lines come in the order a terminal shows them
    done = subprocess.run(
        [*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180, env=env
    )
    output = done.stdout
    assert done.returncode == 2, output[-3000:]
    causes = [ln for ln in output.splitlines() if ln.startswith("sharelake:")]
    assert len(causes) == 1, output[-3000:]
    assert output.rstrip().splitlines()[-1] == causes[0], output[-3000:]
    assert "Traceback" not in output
    return causes[0]


def test_spark_submit_refusals_each_say_why_in_one_line(broker: EmbeddedKafka, tmp_path: Path, unique: str) -> None:
    # nothing set up: an empty cache
    empty = {**os.environ, "SHARELAKE_CACHE": str(tmp_path / "empty")}
    assert "run 'make setup'" in submit_refused(env=empty)
    # a profile that does not exist
    assert "unknown --profile mars" in submit_refused(options=("--profile", "mars"))
    # `make setup` alone (no `make s3`): the script runs, and a table on s3a:// names the fix
    cache = tmp_path / "setup-only"
    (cache / "jars").mkdir(parents=True)
    (cache / "venv").symlink_to(CACHE_DIR / "venv")
    (cache / "jars" / "spark").symlink_to(CACHE_DIR / "jars" / "spark")
    topic = f"s3-missing-{unique}"
    broker.create_topic(topic, partitions=1)
    line = submit_refused(
        "--set", f"kafka.bootstrap_servers={broker.bootstrap}",
        "--set", f"kafka.topic={topic}",
        "--set", f"kafka.group_id=g-{unique}",
        "--set", "delta.table_path=s3a://bucket/events/",
        env={**os.environ, "SHARELAKE_CACHE": str(cache)},
    )  # fmt: skip
    assert "s3a://bucket/events/" in line and "run `make s3`" in line, line
