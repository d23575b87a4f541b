"""Failures inside one driver: slow batches past the record lock, failed Delta writes, broker restart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events
from sharelake.run.pipeline import IngestError, run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.ingest_config import ingest_config
from tests.kafka_helpers import nothing_left, share_receive
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

pytestmark = pytest.mark.usefixtures("clean_faults")  # fault points reset before each test (conftest)


def test_batch_slower_than_the_record_lock(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = f"slow-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, topic, 3000)
    # every Delta write takes 2.5 s longer than the group's 2 s record lock
    monkeypatch.setenv("SHARELAKE_FAULTS", "delay@before_delta_commit=4.5")
    cfg = ingest_config(
        broker, topic, group, tmp_path / "t", "kafka.record_lock_duration_ms=2000", "pump.max_poll_records=500"
    )
    summary = run_ingest(spark, cfg)

    assert_exactly_once(spark, tmp_path / "t", produced)
    assert summary.late_accepts > 0  # the locks did expire under the slow writes ...
    assert summary.dedup_hits + summary.in_batch_duplicates > 0  # ... the redeliveries were not written again
    assert summary.concurrent_claims == 0
    assert nothing_left(broker, topic, group)  # and every record was finally ACCEPTed
    # each record left the group on one ACCEPT the broker took; an ACCEPT beyond it came after its lock
    # expired: refused, and counted one per record, not one per refused partition. Not all of them: the
    # broker takes a late ACCEPT of a record another delivery of it already took, once the share
    # partition's start offset has moved past it, as a no-op (SharePartition skips offsets below it)
    assert summary.released == 0 and summary.rejected == 0
    late = summary.accepted - len(produced)
    assert late > 0 and late // 2 <= summary.ack_errors <= late, (summary.ack_errors, late)


def test_failed_writes_release_and_retry(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = f"retry-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=3)
    produced = produce_json_events(broker.bootstrap, topic, 4000)
    monkeypatch.setenv("SHARELAKE_FAULTS", "error@before_delta_commit#2")
    summary = run_ingest(spark, ingest_config(broker, topic, group, tmp_path / "t"))

    assert summary.failed_attempts == 2
    assert summary.released > 0  # the failed attempts' records went back to the group ...
    assert_exactly_once(spark, tmp_path / "t", produced)  # ... and came back to be written once
    assert summary.accepted == summary.polled - summary.released


def test_a_table_that_cannot_be_written_fails_the_job_and_accepts_nothing(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = f"fatal-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=1)
    produced = produce_json_events(broker.bootstrap, topic, 500)
    monkeypatch.setenv("SHARELAKE_FAULTS", "error@before_delta_commit#1000")
    with pytest.raises(IngestError, match="injected failure"):
        run_ingest(spark, ingest_config(broker, topic, group, tmp_path / "t", "batch.write_attempts=2"))
    monkeypatch.delenv("SHARELAKE_FAULTS")
    # nothing was ACCEPTed: the same group still delivers every record
    counts: dict[tuple[int, int], int] = {}
    again = share_receive(broker, topic, group, seconds=30, expect=500, delivery_counts=counts)
    assert sorted(again) == sorted((p.partition, p.offset) for p in produced)
    # ... and the failing job cost each record one delivery per write attempt, none more: the members
    # stopped polling before the last attempt's records were RELEASEd (else they took them again)
    assert set(counts.values()) == {3}, sorted(set(counts.values()))


# CI's broker fault under a running job (the 3-node cluster's broker deaths, tests/test_failover.py, are make chaos's)
def test_broker_restart_mid_run(spark: SparkSession, tmp_path: Path, unique: str) -> None:
    with EmbeddedKafka(tmp_path / "own-broker") as kafka:
        topic, group = f"restart-{unique}", f"g-{unique}"
        kafka.create_topic(topic, partitions=2)
        produced = produce_json_events(kafka.bootstrap, topic, 3000)
        cfg = ingest_config(kafka, topic, group, tmp_path / "t", "run.mode=continuous")
        stop = threading.Event()
        result: dict[str, object] = {}
        runner = threading.Thread(target=lambda: result.update(summary=run_ingest(spark, cfg, stop)))
        runner.start()
        table = tmp_path / "t"
        deadline = time.monotonic() + 120  # for both waits

        def rows() -> int:
            return int(spark.read.format("delta").load(str(table)).count())

        def stopped() -> bool:
            return not runner.is_alive()

        try:
            wait_for((table / "_delta_log").exists, 120, "the job made no first commit in 120 s", give_up=stopped)
            kafka.stop()  # the broker goes away under the running job ...
            time.sleep(3)  # the outage's length, not a wait for anything
            kafka.start()  # ... and comes back on the same port and data
            produced += produce_json_events(kafka.bootstrap, topic, 3000, start=3000)
            wait_for(
                lambda: rows() >= len(produced), max(0.0, deadline - time.monotonic()), interval_s=2, give_up=stopped,
                failure=lambda: f"the table holds {rows()} of {len(produced)} records 120 s after the job's start "
                f"(the job {'stopped' if stopped() else 'still runs'})",
            )  # fmt: skip
        finally:
            stop.set()
            runner.join(120)
        assert "summary" in result
        assert_exactly_once(spark, table, produced)
        assert nothing_left(kafka, topic, group)  # every record ACCEPTed: no redelivery could add a duplicate later
