"""The two ways a user starts a job, and every way `spark-submit.sh` refuses one.

The README's "On your own broker" example runs as printed (`./spark-submit.sh jobs/main.py
ingest` from the checkout); the `sharelake` command installed from the wheel (the runtime venv:
requirements.txt and the wheel only, what `pip install sharelake-*.whl` gives) runs the same config
outside the checkout. Both land every record once and print the same kinds of lines: Sharelake's
Spark settings live in one place (sharelake.run.spark_session) for both.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.paths import CACHE_DIR, CLASS_ARCHIVES
from devkit.sample_data import Produced, produce_json_events
from sharelake.run import class_archive
from sharelake.run.spark_session import LOG4J_CONFIG, SHARELAKE_CONF, launch_conf, session_conf
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.kafka_helpers import nothing_left
from tests.readme_example import COMMAND, readme_example
from tests.table_checks import assert_exactly_once

ROOT = Path(__file__).resolve().parent.parent
SUBMIT = str(ROOT / "spark-submit.sh")
INSTALLED = CACHE_DIR / "runtime" / "bin" / "sharelake"  # `make runtime-env`: the wheel in a venv of its own
# a line of Spark's (log4j, app/sharelake/run/log4j2.properties), and the lines every run of the job prints
JOB_LINES = (
    "INFO sharelake.run.pipeline: Sharelake",
    "share group members started",
    "INFO sharelake.progress: batch ",
    "run ended:",
)
SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d [\d:]+ (?P<level>[A-Z]+) (?P<logger>[\w.$]+):")


def run(cmd: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 300) -> str:
    """Run `cmd`; its stdout and stderr as one text, as a terminal shows them (asserts exit 0)."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    output = done.stdout + done.stderr  # spark-submit forwards the Python driver's stderr to its stdout
    assert done.returncode == 0, output[-3000:]
    return output


@dataclass
class Started:
    """`run`'s command started in the background: its stdout and stderr each in a file of `cwd`."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    began: float  # wall clock
    took: float = 0.0  # from its start to its last line

    @classmethod
    def of(cls, cmd: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> Started:
        out, err = cwd / "stdout.txt", cwd / "stderr.txt"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env, cwd=cwd, start_new_session=True)
        return cls(proc, out, err, time.time())

    def output(self, timeout: float = 300) -> str:
        """As `run`: its stdout and stderr as one text (asserts exit 0); killed if still running after `timeout`."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise
        self.took = max(self.out.stat().st_mtime, self.err.stat().st_mtime) - self.began  # to its last line
        output = self.out.read_text(errors="replace") + self.err.read_text(errors="replace")
        assert code == 0, output[-3000:]
        return output


def line_kinds(output: str, pattern: re.Pattern[str]) -> set[tuple[str, str]]:
    return {(m["level"], m["logger"]) for line in output.splitlines() if (m := pattern.match(line))}


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
    dry = run([SUBMIT, "--dry-run", "jobs/main.py", "version"])
    assert f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}" in dry.replace("\\", "")


def test_readme_example_submitted_as_printed_and_installed_command_land_alike_and_print_alike(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    """The README's "On your own broker" example, run as printed (`./spark-submit.sh ...` after `make
    setup`), then the same config through the installed command with `--summary`, as a user of the
    wheel runs it: each lands every record once and leaves nothing in its group (a sentinel proves
    it), and both print the same kinds of lines."""
    runs: dict[str, str] = {}
    took: dict[str, float] = {}
    jobs: dict[str, Started] = {}
    backlogs: dict[str, tuple[str, str, Path, list[Produced]]] = {}
    # both started beside each other, each on its own topic, group and table (each is mostly a driver's
    # start and the drain's idle wait: one after the other they took 60 s of CI time)
    for name in ("submitted", "installed"):
        topic, group, table = f"{name}-{unique}", f"g-{name}-{unique}", tmp_path / f"{name}-events"
        example = readme_example(broker.bootstrap, topic, group, table)
        config = tmp_path / name / example.args[-1]
        config.parent.mkdir()
        config.write_text(example.config)
        broker.create_topic(topic, partitions=2)
        backlogs[name] = (topic, group, table, produce_json_events(broker.bootstrap, topic, 2000))
        if name == "submitted":
            checkout = [str(ROOT / path) for path in COMMAND]
            jobs[name] = Started.of([*checkout, *example.args], config.parent)
        else:
            # as a user runs it: outside the checkout, the wheel's own Python for the workers too
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
            jobs[name] = Started.of([str(INSTALLED), *example.args, "--summary"], config.parent, env=env)
    for name, job in jobs.items():
        runs[name], took[name] = job.output(), job.took
        topic, group, table, produced = backlogs[name]
        if name == "installed":
            assert f"starting (from {INSTALLED.parent.parent}/lib/python3.11/site-packages/sharelake)" in runs[name]
            assert "duplicates: 0" in runs[name], runs[name][-3000:]
        assert_exactly_once(spark, table, produced)
        assert nothing_left(broker, topic, group)
    print(f"wall time: submitted {took['submitted']:.1f}s, installed with --summary {took['installed']:.1f}s")
    for name, output in runs.items():
        assert "[Stage" not in output, f"{name}: Spark's console progress bar in the job's output"
        assert "Failed to cancel job group" not in output, f"{name}: a DAGScheduler warning at the end"
        assert "ShutdownHook" not in output, f"{name}: the JVM drain hook ran into a finished driver"
        for line in JOB_LINES:  # the job's own lines (the same code: only a client's retries vary by timing)
            assert line in output, f"{name}: no {line!r} line"
    # no Spark line the submitted job does not print too (what differed was Spark's settings; the one
    # exception: a note that the UI port was taken, by whatever else runs on the machine)
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
        str(ROOT / "jobs" / "main.py"),
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
    assert "s3a://bucket/events" in line and "run `make s3`" in line, line  # the path as normalised


def test_the_driver_maps_the_class_archive_only_when_one_was_built_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No archive in the folder: no option (the JVM starts as it would); one built for this Java and
    pyspark: mapped. spark-submit.sh passes the checkout's (`make setup` built it) to the driver."""
    monkeypatch.setenv(class_archive.ARCHIVES_ENV, str(tmp_path))
    assert "SharedArchiveFile" not in launch_conf()["spark.driver.extraJavaOptions"]
    archive = class_archive.archive_path(tmp_path)
    archive.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={archive}" in launch_conf()["spark.driver.extraJavaOptions"]
    monkeypatch.delenv(class_archive.ARCHIVES_ENV)
    built = class_archive.archive_path(CLASS_ARCHIVES)
    assert built.is_file(), "make setup builds the driver's class archive"
    dry = run([SUBMIT, "--dry-run", "jobs/main.py", "version"], env={**os.environ})
    assert f"-XX:SharedArchiveFile={built}" in dry.replace("\\", "")
