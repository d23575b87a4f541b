"""Scaling past partitions: two ingest jobs (two driver processes) share one single-partition topic.

The same run also provokes the race between them, in a forced order: job 1's first checked append
is held at `delta_files_written` (its data files written, not committed) by a `wait` fault until
the table holds every produced record, which only job 2 can have made so: the lock of the records
job 1 holds expired, job 2 acquired them and landed them first. Then job 1 goes on: Delta refuses
its commit, and job 1 finds job 2's commit holding them, decides them on it and writes only the
rest. When the order could not be forced (job 1 never reached the point, or job 2 never landed the
expired records) the test fails saying so. A downstream Delta streaming query with default options
reads the table all along, while OPTIMIZE and VACUUM run beside the jobs: it never fails, and its
copy holds each record once; a sentinel record proves the group has nothing else to deliver.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from devkit.delta_log import CommitTail, rows_in
from devkit.sample_data import Produced, produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import JobSpec, run_summary, start_job
from tests.kafka_helpers import nothing_left
from tests.maintenance_loop import Maintenance
from tests.table_checks import DownstreamStream, assert_exactly_once
from tests.waiting import wait_for


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
    # job 1's first checked append waits with its files written until the test lets it go on; job 2
    # stays up (idle timeout 20 s, twice the lock) to acquire job 1's records when their lock expires
    go = tmp_path / "job1-go"
    held = go.with_name(go.name + ".waiting")  # sharelake.failures.faults: job 1 is at the point
    args = ("run.mode=until-drained", "run.empty_timeout_ms=90000")
    logs = [tmp_path / f"job{i}.log" for i in (1, 2)]
    jobs = [
        start_job(spec, *args, "run.idle_timeout_ms=6000", faults=f"wait@delta_files_written={go}", log=logs[0]),
        start_job(spec, *args, "run.idle_timeout_ms=20000", log=logs[1]),
    ]

    def exited() -> bool:
        return any(j.poll() is not None for j in jobs)

    def tails() -> str:
        return "\n".join(f"--- {p.name}:\n{p.read_text(errors='replace')[-1500:]}" for p in logs)

    produced: list[Produced] = []

    def produce_steadily() -> None:  # 20,000 records over ~10 s, while both jobs run
        for i in range(20):
            produced.extend(produce_json_events(broker.bootstrap, spec.topic, 1000, start=i * 1000))
            time.sleep(0.5)

    producer = threading.Thread(target=produce_steadily)
    # produce only once both drivers' members have started (after their caches and the warm-up)
    wait_for(
        lambda: all("share group members started" in p.read_text(errors="replace") for p in logs),
        180, lambda: f"the jobs' members did not start:\n{tails()}", give_up=exited,
    )  # fmt: skip
    producer.start()
    silver = downstream(spec.table, tmp_path / "silver")
    maintenance = Maintenance(spark, spec.table, foreign=False)  # OPTIMIZE and VACUUM all along
    maintenance.start()
    commits = CommitTail(spec.table)
    landed = 0

    def all_landed() -> bool:
        nonlocal landed
        landed += rows_in(commits.new())
        return landed >= len(produced)

    try:
        producer.join()
        wait_for(
            held.exists, 120, give_up=exited,
            failure=lambda: f"scenario not provoked: job 1 never reached a checked append's commit\n{tails()}",
        )  # fmt: skip
        # job 1 holds its files uncommitted: only job 2 can land the records they hold, after their lock
        wait_for(
            all_landed, 120, give_up=lambda: jobs[1].poll() is not None,
            failure=lambda: (
                "scenario not provoked: job 2 never acquired and landed the expired records job 1 holds at its "
                f"commit: the table holds {landed} of {len(produced)} records\n{tails()}"
            ),
        )  # fmt: skip
    finally:
        go.touch()  # job 1 goes on: its commit meets job 2's
        rcs = [j.wait(300) for j in jobs]
        maintenance.stop.set()
        maintenance.join(120)
    assert rcs == [0, 0], tails()

    summaries = [run_summary(tmp_path / f"job{i}.log") for i in (1, 2)]
    assert all(s["polled"] > 0 for s in summaries), summaries  # both drivers got records
    # job 2 landed job 1's records after job 1's transaction began: Delta refuses job 1's commit, and its
    # check finds job 2's commit holding them (decided on it, not written again)
    assert summaries[0]["commit_conflicts"] > 0, summaries
    assert summaries[0]["concurrent_claims"] > 0, summaries
    assert maintenance.vacuums > 0, maintenance.passes
    assert all(s["duplicates_repaired"] == 0 for s in summaries), summaries  # nothing to delete
    assert_exactly_once(spark, spec.table, produced)
    assert "DELETE" not in {r.operation for r in DeltaTable.forPath(spark, str(spec.table)).history().collect()}
    silver.finish()
    assert_exactly_once(spark, tmp_path / "silver", produced)
    assert nothing_left(broker, spec.topic, spec.group)
