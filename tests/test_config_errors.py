"""Bad configuration stops the job at start: one line naming the key and the fix, exit code 2 (a
dependency that is down is not bad configuration: it is waited for, then exit code 3).

Each resource check runs against the real broker and real storage; the last test goes through the
real entry point (spark-submit) for the exit code, with a canary secret that must never show.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events
from sharelake.failures.errors import ConfigError
from sharelake.run import preflight
from sharelake.run.pipeline import run_ingest
from sharelake.table.location import TableLocation
from sharelake.testing.kafka_broker import EmbeddedKafka, free_port
from tests.ingest_config import ingest_config
from tests.job_runner import ROOT


def start_error(spark: SparkSession, *args: object, **kw: object) -> str:
    with pytest.raises(ConfigError) as e:
        run_ingest(spark, ingest_config(*args, **kw))  # type: ignore[arg-type]
    message = str(e.value)
    assert "\n" not in message
    return message


def test_a_broker_address_that_does_not_resolve(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a wrong setting, not an outage: no wait (run.dependency_wait_s is left at its 300 s default)
    monkeypatch.setattr(preflight, "BROKER_TIMEOUT_S", 3.0)
    nowhere = "no-such-broker.invalid:9092"
    message = start_error(spark, broker, "t", "g", tmp_path / "t", f"kafka.bootstrap_servers={nowhere}")
    assert message.startswith(f"kafka.bootstrap_servers = '{nowhere}': the address does not resolve"), message
    assert message.endswith("fix the host name")


def test_a_broker_that_does_not_answer_is_an_outage_waited_for_then_exit_3(
    broker: EmbeddedKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # through the real entry point, for the exit code: nothing listens at the address (a broker not up
    # yet), so the start waits run.dependency_wait_s for it, one line a try, then exits 3 with one line
    nowhere = f"127.0.0.1:{free_port()}"
    cmd = [
        str(ROOT / "spark-submit.sh"), str(ROOT / "jobs" / "ingest.py"), "--config", str(ROOT / "conf" / "local.toml"),
        "--set", f"kafka.bootstrap_servers={nowhere}", "--set", "kafka.topic=t",
        "--set", f"delta.table_path={tmp_path / 't'}", "--set", "run.dependency_wait_s=20",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]
    lines = [ln for ln in output.splitlines() if ln.startswith("sharelake:")]
    assert len(lines) == 1, output[-3000:]
    assert lines[0].startswith(f"sharelake: kafka.bootstrap_servers = '{nowhere}': no broker answered within 15s")
    assert lines[0].endswith("still down after run.dependency_wait_s = 20s"), lines
    assert "waiting for a dependency: kafka.bootstrap_servers" in output  # the wait said what it waits for
    assert "Traceback" not in output


def test_missing_topic(broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str) -> None:
    message = start_error(spark, broker, f"nope-{unique}", "g", tmp_path / "t")
    assert message == f"kafka.topic = 'nope-{unique}': no such topic on {broker.bootstrap}; create it or fix the name"


def test_group_settings_the_broker_refuses(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    broker.create_topic(f"t-{unique}")
    # above the broker's group.share.max.record.lock.duration.ms (1 hour)
    extra = "kafka.record_lock_duration_ms=86400000"
    message = start_error(spark, broker, f"t-{unique}", f"g-{unique}", tmp_path / "t", extra)
    assert message.startswith(f"kafka.group_id = 'g-{unique}': the broker refused the share-group settings")
    assert "share.record.lock.duration.ms=86400000" in message and "fix kafka." in message


def test_table_path_that_is_not_a_delta_table(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    broker.create_topic(f"t-{unique}")
    not_delta = tmp_path / "parquet-here"
    not_delta.mkdir()
    (not_delta / "part-0.parquet").write_bytes(b"PAR1")
    message = start_error(spark, broker, f"t-{unique}", f"g-{unique}", not_delta)
    assert message == (
        f"delta.table_path = '{not_delta}': the path holds data but is not a Delta table; "
        "point it at a Delta table or at a new, empty path"
    )


def test_table_path_that_cannot_be_written(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    broker.create_topic(f"t-{unique}")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    message = start_error(spark, broker, f"t-{unique}", f"g-{unique}", a_file / "table")
    assert message.startswith(f"delta.table_path = '{a_file / 'table'}': not writable (")
    assert message.endswith("fix the path or its permissions")


@pytest.fixture
def immutable_parent(tmp_path: Path) -> Iterator[Path]:
    """A folder holding a writable table folder `t`, in which no file can be created: `chattr +i`
    (tests run as root, whom a chmod does not stop), undone at teardown."""
    parent = tmp_path / "read-only"
    (parent / "t").mkdir(parents=True)
    if subprocess.run(["chattr", "+i", str(parent)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a file system that has it)")
    try:
        yield parent
    finally:
        subprocess.run(["chattr", "-i", str(parent)], check=True)


def test_a_table_whose_parent_folder_is_not_writable_stops_the_start_not_its_first_commit(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, immutable_parent: Path
) -> None:
    # the table's own folder is writable; the folder holding it, where its commit lock lives, is not
    topic = f"t-{unique}"
    broker.create_topic(topic)
    produce_json_events(broker.bootstrap, topic, 10)  # so a job that started would meet its first commit
    table = immutable_parent / "t"
    dead_letters = f"dead_letter.table_path={tmp_path / 'dead_letters'}"
    message = start_error(spark, broker, topic, f"g-{unique}", table, dead_letters, "batch.write_attempts=1")
    assert message == (
        f"delta.table_path = '{table}': the table's commit lock {immutable_parent / '.t.sharelake-commit.lock'} "
        f"cannot be created (Operation not permitted): make {immutable_parent} writable by the job, or put the "
        "table in a folder it can write"
    )
    assert not (table / "_delta_log").exists()  # nothing was committed


def test_delivery_cap_not_below_the_group_limit(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    broker.create_topic(f"t-{unique}")
    extra = "dead_letter.max_delivery_count=5"  # the group's share.delivery.count.limit is 5
    message = start_error(spark, broker, f"t-{unique}", f"g-{unique}", tmp_path / "t", extra)
    assert message.startswith(
        "dead_letter.max_delivery_count = 5 is not below the share group's share.delivery.count.limit (5)"
    )
    assert message.endswith("set it to 4 or less")


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ("id lng", "payload.schema = 'id lng': not a Spark DDL schema ("),
        ("id long, offset long", "payload.schema = 'id long, offset long': field(s) offset collide with"),
    ],
)
def test_payload_schema_that_cannot_be_used(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, schema: str, expected: str
) -> None:
    broker.create_topic(f"t-{unique}")
    sets = ("payload.format=json", f"payload.schema={schema}")
    message = start_error(spark, broker, f"t-{unique}", f"g-{unique}", tmp_path / "t", *sets)
    assert message.startswith(expected)


@pytest.mark.parametrize(
    "sets, expected",
    [
        (("write.mode=upsert",), 'config key write: mode = "upsert" needs keys: the columns that identify a row'),
        (
            ("write.mode=upsert", 'write.keys=["account"]'),
            "write.keys names account, not a column of the table (topic, partition, offset, key, headers, ",
        ),
    ],
    ids=["no key column", "unknown key name"],
)
def test_upsert_keys_that_cannot_be_used(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, sets: tuple[str, ...], expected: str
) -> None:
    broker.create_topic(f"t-{unique}")
    json = ("payload.format=json", "payload.schema=id long, user string")
    message = start_error(spark, broker, f"t-{unique}", f"g-{unique}", tmp_path / "t", *json, *sets)
    assert message.startswith(expected), message


def test_dead_letter_path_that_is_not_a_delta_table(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    broker.create_topic(f"t-{unique}")
    (tmp_path / "dlq").mkdir()
    (tmp_path / "dlq" / "notes.txt").write_text("not delta")
    extra = f"dead_letter.table_path={tmp_path / 'dlq'}"
    message = start_error(spark, broker, f"t-{unique}", f"g-{unique}", tmp_path / "t", extra)
    assert message.startswith(f"dead_letter.table_path = '{tmp_path / 'dlq'}': the path holds data but is not a Delta")


def test_entry_point_exits_2_and_never_shows_secrets(broker: EmbeddedKafka, tmp_path: Path) -> None:
    canary = "CANARY-s3cr3t-7f1d"
    cmd = [
        str(ROOT / "spark-submit.sh"), str(ROOT / "jobs" / "ingest.py"), "--config", str(ROOT / "conf" / "local.toml"),
        "--set", f"kafka.bootstrap_servers={broker.bootstrap}",
        "--set", "kafka.topic=does-not-exist",
        "--set", f"delta.table_path={tmp_path / 't'}",
        "--set", "kafka.client.sasl.username=alice",
        "--set", f"kafka.client.sasl.password={canary}",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert [ln for ln in output.splitlines() if ln.startswith("sharelake:")] == [
        f"sharelake: kafka.topic = 'does-not-exist': no such topic on {broker.bootstrap}; create it or fix the name"
    ]
    assert canary not in output
    assert "Traceback" not in output


def _check_path(spark: SparkSession, path: str, errors: list[BaseException]) -> None:
    try:
        preflight.check_table_path(spark, TableLocation.at(path))
    except BaseException as e:  # noqa: BLE001 - collected for the assertion
        errors.append(e)


def test_jobs_starting_together_on_one_new_table_pass_the_path_check(spark: SparkSession, tmp_path: Path) -> None:
    # replicas of a job start at the same moment on the same new table (a CI run of the two-jobs
    # test once failed job 2 here: "not writable", while job 1 held the write probe)
    for round_ in range(30):
        path = str(tmp_path / f"t{round_}")
        errors: list[BaseException] = []

        threads = [threading.Thread(target=_check_path, args=(spark, path, errors)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"round {round_}: {errors}"
        assert list(Path(path).iterdir()) == []  # no probe left behind
