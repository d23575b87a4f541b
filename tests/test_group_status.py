"""`sharelake status` and its reader (app/group_status.py) against a real broker and a real Delta
table: the group's live members while a job runs, none after; the lag of the records produced after
the job stopped; the table's last Sharelake commit; the command's `--json` output."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from pyspark.sql import SparkSession

from app.consume.member_pool import MemberPool
from app.error_lines import ConfigError
from app.group_status import NO_SUCH_GROUP, GroupState, read_group_state, read_group_status
from app.java_admin import close_admin, create_admin, java_admin_config
from app.pipeline import run_ingest
from devkit.kafka_broker import EmbeddedKafka
from devkit.paths import PROJECT_ROOT as ROOT
from devkit.paths import VENV_BIN
from devkit.sample_data import produce_json_events
from tests.ingest_config import ingest_config


def wait_for_state(spark: SparkSession, admin: Any, group: str, done: Any, timeout_s: float = 30) -> GroupState:
    """The group's state once `done(state)` holds (the broker persists share state asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = read_group_state(spark, admin, group)
        if done(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def assigned(state: GroupState) -> set[tuple[str, int]]:
    return {tp for m in state.members for tp in m.partitions}


def test_status_shows_members_lag_and_the_last_commit(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group, table = f"status-{unique}", f"sharelake-{unique}", tmp_path / "table"
    broker.create_topic(topic, partitions=3)
    produce_json_events(broker.bootstrap, topic, 600)
    cfg = ingest_config(broker, topic, group, table, "pump.members=2", idle_ms=2000)
    admin = create_admin(spark, cfg.kafka.client_config())
    live: list[GroupState] = []

    def while_running(pool: MemberPool) -> None:
        # both members joined and the broker has spread the 3 partitions over them (a moment after the joins)
        everything = {(topic, p) for p in range(3)}
        live.append(wait_for_state(spark, admin, group, lambda s: len(s.members) == 2 and assigned(s) == everything))

    try:
        summary = run_ingest(spark, cfg, on_pool_started=while_running)
        assert summary.accepted == 600
        assert len(live[0].members) == 2, live[0]
        assert assigned(live[0]) == {(topic, p) for p in range(3)}, live[0]

        late = produce_json_events(broker.bootstrap, topic, 50)  # after the job: nobody reads them
        per_partition = {p: sum(1 for r in late if r.partition == p) for p in range(3)}
        after = wait_for_state(spark, admin, group, lambda s: sum(p.lag or 0 for p in s.partitions) == 50)
    finally:
        close_admin(spark, admin)

    assert after.members == [] and after.state == "Empty", after
    assert {p.partition: p.lag for p in after.partitions if p.topic == topic} == per_partition, after
    assert all(p.start_offset is not None for p in after.partitions), after  # the group holds their state

    status = read_group_status(spark, cfg)
    assert status.total_lag == 50 and status.members == []
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").select("version", "timestamp").first()
    assert history is not None
    main, dead = status.tables
    assert main.table == str(table) and main.version == history.version, status
    assert main.age_s is not None and 0 <= main.age_s < 300, status
    assert dead.version is None  # no record was dead-lettered: no dead-letter table
    text = "\n".join(status.lines())
    assert f"share group {group}: Empty, 0 members, lag 50" in text, text
    assert f"last Sharelake commit v{history.version}" in text, text
    doc = json.loads(json.dumps(status.as_json()))
    assert doc["total_lag"] == 50 and doc["tables"][0]["version"] == history.version

    # the same through the command users run: `sharelake status --json`
    sets = [f"kafka.bootstrap_servers={broker.bootstrap}", f"kafka.topic={topic}", f"kafka.group_id={group}",
            f"delta.table_path={table}"]  # fmt: skip
    done = subprocess.run(
        [str(VENV_BIN / "sharelake"), "status", "--json", "--config", str(ROOT / "conf" / "local.toml"),
         *(arg for key in sets for arg in ("--set", key))],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    shown = json.loads(done.stdout[done.stdout.index("{") :])
    assert shown["total_lag"] == 50 and shown["tables"][0]["version"] == history.version, shown


def test_a_group_that_does_not_exist_or_is_not_a_share_group(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic = f"status-none-{unique}"
    broker.create_topic(topic, partitions=1)
    status = read_group_status(spark, ingest_config(broker, topic, f"never-{unique}", tmp_path / "table"))
    assert (status.state, status.members, status.partitions) == (NO_SUCH_GROUP, [], []), status
    assert status.tables[0].version is None
    assert status.lines()[0] == f"share group never-{unique}: {NO_SUCH_GROUP}, 0 members, lag 0"

    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"classic-{unique}"})
    classic.subscribe([topic])
    deadline = time.monotonic() + 30
    while not classic.assignment() and time.monotonic() < deadline:  # joined: the group exists
        classic.poll(0.2)
    classic.close()
    with pytest.raises(ConfigError, match="is not a share group"):
        read_group_status(spark, ingest_config(broker, topic, f"classic-{unique}", tmp_path / "table"))


def test_the_java_admin_config_maps_librdkafka_security_settings() -> None:
    java = java_admin_config(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": 'pa"ss',
            "ssl.ca.location": "/etc/ca.pem",
        }
    )
    assert java["security.protocol"] == "SASL_SSL" and java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="pa\\"ss";'
    )
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", "/etc/ca.pem")
