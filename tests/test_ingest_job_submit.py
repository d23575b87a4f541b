"""The real entry point: `./spark-submit.sh jobs/ingest.py` as users run it, and its exit codes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pyspark.sql import SparkSession

from devkit.kafka_broker import EmbeddedKafka
from devkit.sample_data import produce_json_events

ROOT = Path(__file__).resolve().parent.parent


def submit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(ROOT / "spark-submit.sh"),
        str(ROOT / "jobs" / "ingest.py"),
        "--config",
        str(ROOT / "conf" / "local.toml"),
    ]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout)


def test_submitted_job_drains_the_topic_into_delta(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"submit-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, topic, 500)
    done = submit(
        "--set", f"kafka.bootstrap_servers={broker.bootstrap}",
        "--set", f"kafka.topic={topic}",
        "--set", f"kafka.group_id=g-{unique}",
        "--set", f"delta.table_path={tmp_path / 'table'}",
        "--set", "run.mode=until-drained",
        "--set", "run.idle_timeout_ms=2000",
        "--summary",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "duplicates: 0" in done.stdout
    # a normal end removes the JVM drain hook: no stack trace from it calling into a finished driver
    assert "ShutdownHook" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
    rows = spark.read.format("delta").load(str(tmp_path / "table")).select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted((p.partition, p.offset) for p in produced)


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    done = submit("--set", "pump.members=zero", "--set", f"delta.table_path={tmp_path}", timeout=60)
    assert done.returncode == 2
    # spark-submit forwards the Python driver's stderr to its own stdout: read both, as a terminal would
    output = done.stdout + done.stderr
    lines = [ln for ln in output.splitlines() if ln.startswith("sharelake:")]
    assert lines == [
        "sharelake: config key pump.members = 'zero': Input should be a valid integer, "
        "unable to parse string as an integer; fix the value (see conf/local.toml)"
    ]
    assert "Traceback" not in output
