"""`sharelake status` and its reader (app/sharelake/ops/group_status.py, each group type's `read_state`) against a
real broker and a real Delta table: the group's live members while a job runs, none after; the lag
of the records produced after the job stopped; the table's last Sharelake commit; the command's
`--json` output. The same for a consumer group, whose lag the running job also serves to Prometheus."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession

from devkit.paths import PROJECT_ROOT as ROOT
from devkit.paths import VENV_BIN
from devkit.sample_data import produce_json_events
from sharelake.config.settings import KafkaConfig
from sharelake.consume.group_admin import GroupAdmin
from sharelake.consume.group_type import NO_SUCH_GROUP, GroupState
from sharelake.consume.group_types import group_type
from sharelake.consume.java_admin import java_admin_config
from sharelake.consume.member_pool import MemberPool
from sharelake.failures.errors import ConfigError
from sharelake.ops.group_status import GroupStatus, read_group_status
from sharelake.run.pipeline import RunSummary, run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka, free_port
from tests.ingest_config import ingest_config
from tests.waiting import wait_for


def wait_for_state(
    admin: GroupAdmin, k: KafkaConfig, done: Callable[[GroupState], bool], timeout_s: float = 30
) -> GroupState:
    """The group's state (its type's `read_state`) once `done(state)` holds (the broker persists share
    state asynchronously)."""
    group = group_type(k)
    seen: list[GroupState] = []

    def read() -> GroupState | None:
        seen[:] = [group.read_state(admin, k)]
        return seen[0] if done(seen[0]) else None

    return wait_for(read, timeout_s, lambda: f"group {k.group_id} never reached the state waited for: {seen}")


def assigned(state: GroupState | GroupStatus) -> set[tuple[str, int]]:
    return {tp for m in state.members for tp in m.partitions}


def test_status_shows_members_lag_and_the_last_commit(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group, table = f"status-{unique}", f"sharelake-{unique}", tmp_path / "table"
    broker.create_topic(topic, partitions=3)
    produce_json_events(broker.bootstrap, topic, 600)
    cfg = ingest_config(broker, topic, group, table, "pump.members=2", idle_ms=2000)
    admin = GroupAdmin(cfg.kafka, spark)
    live: list[GroupState] = []

    def while_running(pool: MemberPool) -> None:
        # both members joined and the broker has spread the 3 partitions over them (a moment after the joins)
        everything = {(topic, p) for p in range(3)}
        live.append(wait_for_state(admin, cfg.kafka, lambda s: len(s.members) == 2 and assigned(s) == everything))

    try:
        summary = run_ingest(spark, cfg, on_pool_started=while_running)
        assert summary.accepted == 600
        assert len(live[0].members) == 2, live[0]
        assert assigned(live[0]) == {(topic, p) for p in range(3)}, live[0]

        late = produce_json_events(broker.bootstrap, topic, 50)  # after the job: nobody reads them
        per_partition = {p: sum(1 for r in late if r.partition == p) for p in range(3)}
        after = wait_for_state(admin, cfg.kafka, lambda s: sum(p.lag or 0 for p in s.partitions) == 50)
    finally:
        admin.close()

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

    def joined() -> bool:  # the group exists once the consumer has partitions
        classic.poll(0.2)
        return bool(classic.assignment())

    wait_for(joined, 30, "the classic consumer never joined its group", interval_s=0)
    classic.close()
    with pytest.raises(ConfigError, match="is not a share group"):
        read_group_status(spark, ingest_config(broker, topic, f"classic-{unique}", tmp_path / "table"))


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The job's metrics endpoint now: series name -> labels -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_status_and_the_lag_gauge_read_a_consumer_group(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    topic, group, table = f"status-cg-{unique}", f"cg-{unique}", tmp_path / "table"
    broker.create_topic(topic, partitions=3)
    port = free_port()
    sets = ("kafka.group_type=consumer", "pump.members=2", "run.mode=continuous", f"metrics.prometheus_port={port}",
            "metrics.prometheus_addr=127.0.0.1", "metrics.lag_interval_s=1")  # fmt: skip
    cfg = ingest_config(broker, topic, group, table, *sets)
    before = read_group_status(spark, cfg)  # no member ever joined, nothing committed
    assert (before.state, before.members, before.partitions) == (NO_SUCH_GROUP, [], []), before
    assert before.lines()[0] == f"consumer group {group}: {NO_SUCH_GROUP}, 0 members, lag 0"

    first = produce_json_events(broker.bootstrap, topic, 900)
    landed = {p: sum(1 for r in first if r.partition == p) for p in range(3)}
    stop, ran = threading.Event(), list[RunSummary]()
    job = threading.Thread(target=lambda: ran.append(run_ingest(spark, cfg, stop_event=stop)), name="cg-status-job")
    job.start()
    everything = {(topic, p) for p in range(3)}
    try:
        # the job's gauge: every partition's committed offset at its end (lag 0), the job's 2 members
        def caught_up() -> bool:
            try:
                metrics = scrape(port)
            except OSError:  # the endpoint is not up yet
                return False
            lag = metrics.get("sharelake_group_lag", {})
            return len(lag) == 3 and sum(lag.values()) == 0 and metrics["sharelake_group_members"][()] == 2

        wait_for(lambda: job.is_alive() and caught_up(), 240, lambda: f"the gauge never caught up: {ran}")

        def both_members() -> GroupStatus | None:  # and settled: a member joining late rebalances the group
            status = read_group_status(spark, cfg)
            settled = status.state == "Stable" and len(status.members) == 2 and assigned(status) == everything
            return status if settled else None

        live = wait_for(
            both_members, 60, "the status never showed the job's 2 members holding the 3 partitions, settled"
        )
    finally:
        stop.set()
        job.join(180)
    assert ran and ran[0].accepted == 900, ran
    assert live.total_lag == 0, live
    assert {p.partition: p.start_offset for p in live.partitions} == landed, live  # committed: each partition's end

    late = produce_json_events(broker.bootstrap, topic, 60)  # after the job: nobody reads them
    remaining = {p: sum(1 for r in late if r.partition == p) for p in range(3)}
    after = read_group_status(spark, cfg)
    assert (after.state, after.members) == ("Empty", []), after
    assert {p.partition: p.lag for p in after.partitions} == remaining, after
    assert {p.partition: p.start_offset for p in after.partitions} == landed, after
    assert after.lines()[0] == f"consumer group {group}: Empty, 0 members, lag 60", after.lines()
    assert after.tables[0].version is not None, after  # the job's last commit to its table
    doc = json.loads(json.dumps(after.as_json()))
    assert doc["group_type"] == "consumer" and doc["total_lag"] == 60, doc


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
