"""Table maintenance while the job writes: OPTIMIZE, VACUUM and a foreign writer, plus a crash mid-way.

Another SparkSession (the test's own) runs Sharelake's maintenance pass (`sharelake.ops.maintenance`: OPTIMIZE,
then VACUUM, the retention check relaxed to a minute, so the files OPTIMIZE removed early really go,
while files being written stay) and appends rows of its own, in a loop, while the job ingests a
steady stream in its own driver. Their commits beat some of the job's: Delta refuses those and the
job commits the same files again after checking. The job is killed once mid-way, so its successor
loads the dedup cache from a log full of OPTIMIZE's rewrite commits and must still recognise every
redelivered record. A downstream Delta streaming query with default options reads the table all along: the
compactions do not stop it and its copy holds each record once. At the end the scheduled job itself
(`sharelake maintain`) compacts what is left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devkit.delta_log import added_files, data_commits, longest_open_write_s, read_commits
from devkit.sample_data import Produced, produce_json_events
from sharelake.cli import main as sharelake
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import ROOT, JobSpec, kill_job, run_summary, start_job
from tests.kafka_helpers import nothing_left
from tests.maintenance_loop import FOREIGN, RETENTION_CHECK, Maintenance
from tests.table_checks import DownstreamStream, assert_exactly_once, dead_letter_rows
from tests.waiting import wait_for


def test_optimize_vacuum_and_a_foreign_writer_lose_and_double_nothing(
    broker: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    unique: str,
    downstream: Callable[[Path, Path], DownstreamStream],
) -> None:
    spec = JobSpec(broker, f"maint-{unique}", f"g-{unique}", tmp_path / "table", lock_ms=10_000)
    broker.create_topic(spec.topic, partitions=4)
    produced: list[Produced] = []

    produced += produce_json_events(broker.bootstrap, spec.topic, 4000)  # for the job's first commits

    killed = threading.Event()

    def produce_steadily() -> None:  # 1,000 a second while maintenance runs, until 8 s after the job died
        i, after_kill = 4, None
        while i < 300 and (after_kill is None or time.monotonic() < after_kill):
            produced.extend(produce_json_events(broker.bootstrap, spec.topic, 1000, start=i * 1000))
            i += 1
            if after_kill is None and killed.is_set():
                after_kill = time.monotonic() + 8  # the successor finds these: the crash is mid-stream
            time.sleep(1.0)

    log1 = tmp_path / "run1.log"
    job = start_job(spec, "run.mode=continuous", log=log1)
    maintenance = Maintenance(spark, spec.table)
    try:
        wait_for(
            lambda: data_commits(read_commits(spec.table)), 120, interval_s=0.2, give_up=lambda: job.poll() is not None,
            failure=lambda: f"the job made no data commit in 120 s (exit {job.poll()}):\n"
            + log1.read_text(errors="replace")[-3000:],
        )  # fmt: skip
        producer = threading.Thread(target=produce_steadily)
        producer.start()
        silver = downstream(spec.table, tmp_path / "silver")
        maintenance.start()
        # compaction under the live job ... (the maintenance session's first round is slow: 60-120 s
        # on a loaded machine; a budget of its own, so a slow first OPTIMIZE is not a failure)
        wait_for(
            lambda: maintenance.optimized_files, 300,
            lambda: "scenario not provoked: no OPTIMIZE compacted a file under the live job in 300 s "
            f"({maintenance.rounds} rounds; conflicts {maintenance.conflicts})",
        )  # fmt: skip
        kill_job(job)  # ... then a crash: its successor loads the dedup cache from the maintained log
        killed.set()
        rc = start_job(spec, "run.mode=until-drained", "run.idle_timeout_ms=12000", log=tmp_path / "run2.log").wait(300)
        producer.join()
    finally:
        killed.set()  # a failed wait: the producer stops too, and the job
        if job.poll() is None:
            kill_job(job)
        maintenance.stop.set()
        if maintenance.is_alive():
            maintenance.join(120)
    log2 = (tmp_path / "run2.log").read_text(errors="replace")
    assert rc == 0, log2[-3000:]
    second = run_summary(tmp_path / "run2.log")
    on_disk = sum(1 for f in spec.table.rglob("*.parquet") if "_delta_log" not in f.parts)
    print(
        f"maintenance: {maintenance.rounds} rounds, {maintenance.optimized_files} files compacted, "
        f"{maintenance.vacuums} vacuums ({len(added_files(spec.table)) - on_disk} of the files ever added are gone "
        f"from disk), {maintenance.foreign_rows} foreign rows, "
        f"conflicts {maintenance.conflicts}; passes {maintenance.passes};\n"
        f"longest write before its commit {longest_open_write_s(spec.table):.1f} s; "
        f"second run: {second}"
    )

    assert maintenance.optimized_files > 0, maintenance.conflicts  # the maintenance really ran
    assert maintenance.foreign_rows > 0, maintenance.conflicts
    assert second["polled"] > 0  # the successor ingested the rest, deciding from the maintained log
    assert_exactly_once(spark, spec.table, produced, where=f"topic = '{spec.topic}'")
    foreign = spark.read.format("delta").load(str(spec.table)).where(F.col("topic") == FOREIGN).count()
    assert foreign == maintenance.foreign_rows  # the other writer's rows are untouched
    # conflicts, if any, were retried inside the batch: no RELEASE storm, nothing near the delivery cap
    assert second["failed_attempts"] == 0 and second["released"] == 0, second
    assert second["dead_lettered"] == 0 and dead_letter_rows(spark, spec.table) == 0
    assert nothing_left(broker, spec.topic, spec.group)
    silver.finish()  # never failed: OPTIMIZE changes no data, and nothing was deleted
    assert_exactly_once(spark, tmp_path / "silver", produced, where=f"topic = '{spec.topic}'")

    # the scheduled job, as users run it after the ingest: every table of the config compacted
    files_before = spark.read.format("delta").load(str(spec.table)).inputFiles()
    args = ["--config", str(ROOT / "conf" / "local.toml")]
    for setting in spec.sets("maintenance.vacuum_retain_hours=0.0167"):
        args += ["--set", setting]
    spark.conf.set(RETENTION_CHECK, "false")
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        assert sharelake(["maintain", *args]) == 0  # in this session: the builder joins it (and sets its SQL defaults)
    finally:
        spark.conf.unset(RETENTION_CHECK)
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle))
    assert len(spark.read.format("delta").load(str(spec.table)).inputFiles()) < len(files_before)
    assert_exactly_once(spark, spec.table, produced, where=f"topic = '{spec.topic}'")
