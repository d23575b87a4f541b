"""Scaling past partitions: two ingest jobs (two driver processes) share one single-partition topic.

The same run also provokes the race between them: job 1's third write stalls past the record lock
after writing its data files, job 2 acquires those records after the lock expires and lands them
first, and Delta refuses job 1's late commit: job 1 finds job 2's commit holding them, decides them
on it and writes only the rest. A downstream Delta streaming query with default options reads the
table all along, while OPTIMIZE and VACUUM run beside the jobs: it never fails, and its copy holds
each record once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from devkit.kafka_broker import EmbeddedKafka
from devkit.sample_data import Produced, produce_json_events
from tests.job_runner import JobSpec, run_summary, start_job
from tests.maintenance_loop import Maintenance
from tests.table_checks import DownstreamStream, assert_exactly_once


def test_two_jobs_on_one_partition_share_it_and_land_each_record_once_even_racing_on_an_expired_lock(
    broker: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    unique: str,
    downstream: Callable[[Path, Path], DownstreamStream],
) -> None:
    # a consumer group would give the single partition to one job; a share group feeds both
    spec = JobSpec(broker, f"one-part-{unique}", f"g-{unique}", tmp_path / "table", lock_ms=10000)
    broker.create_topic(spec.topic, partitions=1)
    # job 1's third checked append waits 15 s with its files written: 5 s past the lock of the records
    # it holds. Job 2 stays up (idle timeout 20 s) to acquire them when the lock expires.
    stalled = "delay@delta_files_written#3=15"
    args = ("run.mode=until-drained", "run.empty_timeout_ms=90000")
    jobs = [
        start_job(spec, *args, "run.idle_timeout_ms=6000", faults=stalled, log=tmp_path / "job1.log"),
        start_job(spec, *args, "run.idle_timeout_ms=20000", log=tmp_path / "job2.log"),
    ]

    produced: list[Produced] = []

    def produce_steadily() -> None:  # 20,000 records over ~10 s, while both jobs run
        for i in range(20):
            produced.extend(produce_json_events(broker.bootstrap, spec.topic, 1000, start=i * 1000))
            time.sleep(0.5)

    producer = threading.Thread(target=produce_steadily)
    # produce only once both drivers' members have started (after their caches and the warm-up)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not all(
        "share group members started" in (tmp_path / f"job{i}.log").read_text(errors="replace") for i in (1, 2)
    ):
        time.sleep(0.5)
    producer.start()
    silver = downstream(spec.table, tmp_path / "silver")
    maintenance = Maintenance(spark, spec.table, foreign=False)  # OPTIMIZE and VACUUM all along
    maintenance.start()
    try:
        producer.join()
        rcs = [j.wait(300) for j in jobs]
    finally:
        maintenance.stop.set()
        maintenance.join(120)
    assert rcs == [0, 0], [(tmp_path / f"job{i}.log").read_text()[-2000:] for i in (1, 2)]

    summaries = [run_summary(tmp_path / f"job{i}.log") for i in (1, 2)]
    assert all(s["polled"] > 0 for s in summaries), summaries  # both drivers got records
    assert summaries[0]["commit_conflicts"] > 0, summaries  # Delta refused job 1's late commit ...
    assert summaries[0]["concurrent_claims"] > 0, summaries  # ... because job 2 had landed them first
    assert maintenance.vacuums > 0, maintenance.passes
    assert all(s["duplicates_repaired"] == 0 for s in summaries), summaries  # nothing to delete
    assert_exactly_once(spark, spec.table, produced)
    assert "DELETE" not in {r.operation for r in DeltaTable.forPath(spark, str(spec.table)).history().collect()}
    silver.finish()
    assert_exactly_once(spark, tmp_path / "silver", produced)
