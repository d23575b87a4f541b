"""Random kill -9 of the driver while a backlog is ingested: zero lost, zero duplicates.

The full run (`SHARELAKE_CHAOS_KILLS=10 SHARELAKE_CHAOS_RECORDS=100000`) is what the closing
notes quote; CI runs the bounded default (3 kills, 20,000 records). `SHARELAKE_CHAOS_SETS`
(space-separated section.key=value) runs the job with other settings, e.g.
`pump.acknowledgement_commit=async`.

Each run is killed once it has written something, at a random moment up to 3 s later. Before each
run the backlog is topped up to `SHARELAKE_CHAOS_RECORDS` not yet landed, so every kill strikes a
run with records to ingest, however fast the machine drained the previous runs; the test fails
saying so if a kill found it all landed.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.delta_log import read_commits, rows_in
from devkit.job_logs import race_counts
from devkit.sample_data import Produced, produce_json_events
from sharelake.consume.share.group_settings import DELIVERY_LIMIT, apply_group_settings
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import JobSpec, drain_in_process, kill_job, run_summary, start_job
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

KILLS = int(os.environ.get("SHARELAKE_CHAOS_KILLS", "3"))
RECORDS = int(os.environ.get("SHARELAKE_CHAOS_RECORDS", "20000"))
SETS = tuple(os.environ.get("SHARELAKE_CHAOS_SETS", "").split())
MAX_DELIVERY_LIMIT = 10  # the broker's group.share.max.delivery.count.limit (its default)


def table_rows(table: Path) -> int:
    """Rows the table's commits hold, from its log (no Spark job while the job runs; 0 before it exists)."""
    return rows_in(read_commits(table))


@pytest.mark.chaos
# CI runs the share group's loop; the consumer group's is `make chaos`'s (CI time: its crash points run in CI)
@pytest.mark.parametrize("group_type", ["share", pytest.param("consumer", marks=pytest.mark.long)])
def test_random_kill_loop(
    group_type: str, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    rng = random.Random(int(os.environ.get("SHARELAKE_CHAOS_SEED", "932")))
    # a consumer group: a killed job's members leave after 6 s (the broker's minimum), not 45 s
    mode = (
        f"kafka.group_type={group_type}",
        *(["kafka.client.session.timeout.ms=6000"] if group_type == "consumer" else []),
    )
    if group_type == "share":
        # each kill costs the records the killed job held a delivery, and the same records can be held at
        # every kill: the group's delivery limit is set above what the kills can spend, so the delivery cap
        # (tested on its own in test_bad_input) parks no good record here
        limit = min(MAX_DELIVERY_LIMIT, KILLS + 3)
        apply_group_settings(broker.admin(), f"g-{unique}", {DELIVERY_LIMIT: str(limit)})
        mode += (f"dead_letter.max_delivery_count={limit - 1}",)
    spec = JobSpec(broker, f"chaos-{unique}", f"g-{unique}", tmp_path / "table", lock_ms=4000, settings=(*mode, *SETS))
    broker.create_topic(spec.topic, partitions=3)
    produced: list[Produced] = []

    def kill_while_ingesting(i: int) -> None:
        """Top the backlog up, start run `i`; once it has written something, kill -9 it at a random moment."""
        before = table_rows(spec.table)
        top_up = RECORDS - (len(produced) - before)
        if top_up > 0:
            produced.extend(produce_json_events(broker.bootstrap, spec.topic, top_up, start=len(produced)))
        log = tmp_path / f"kill{i}.log"
        job = start_job(spec, "run.mode=continuous", log=log)
        try:
            wait_for(
                lambda: table_rows(spec.table) > before, 180, give_up=lambda: job.poll() is not None,
                failure=lambda: f"scenario not provoked: run {i} wrote nothing (exit {job.poll()})\n"
                + log.read_text(errors="replace")[-3000:],
            )  # fmt: skip
            time.sleep(rng.uniform(0.0, 3.0))  # the kill's moment, not a wait for anything
            if job.poll() is not None:
                pytest.fail(f"run {i} exited by itself ({job.poll()}) before its kill:\n{log.read_text()[-3000:]}")
            landed = table_rows(spec.table)
        finally:
            kill_job(job)
        if landed >= len(produced):
            pytest.fail(f"scenario not provoked: the backlog had all landed before kill {i} ({landed:,} rows)")

    for i in range(KILLS):
        kill_while_ingesting(i)
    rows_before_drain = table_rows(spec.table)

    assert drain_in_process(spark, spec, tmp_path / "final.log", idle_ms=10_000) == 0
    final = run_summary(tmp_path / "final.log")
    replans, refused = race_counts([*(tmp_path / f"kill{i}.log" for i in range(KILLS)), tmp_path / "final.log"])
    print(
        f"chaos: {KILLS} kills, {len(produced)} records (topped up to {RECORDS} not landed before each run), "
        f"{rows_before_drain} rows before the final run, "
        f"{replans} re-planned appends and {refused} refused commits in all runs; final run: {final}"
    )
    assert (replans, refused) == (0, 0)  # each killed job was dead before the next started: no race
    assert_exactly_once(spark, spec.table, produced)
    if group_type == "share":  # a consumer group's position is its committed offsets, not a share delivery
        assert nothing_left(broker, spec.topic, spec.group)
