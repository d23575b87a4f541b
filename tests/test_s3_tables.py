"""Delta tables on S3 (s3a://, through Hadoop's S3A connector to a real S3 API server).

The job runs as users run it (spark-submit.sh), with the S3 endpoint in its `[spark_conf]` and the
credentials in its environment; its table, its dead-letter table and Spark's checkpoint all live in
the bucket. A kill -9 in the middle, then a restart: every record exactly once, read back by chispa.
Every part of Sharelake that reads the Delta log itself does it through S3 here: the dedup cache
(the restart recognises the crashed batch's commit), the background checkpoints with Delta Kernel
(every 2 commits), Spark's checkpoint of the trigger clock.
"""

from __future__ import annotations

import json
import threading
import time
from itertools import pairwise
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from devkit.s3_server import EmbeddedS3
from devkit.sample_data import produce_json_events
from sharelake.config.loader import load_config
from sharelake.failures import faults
from sharelake.failures.errors import ConfigError, DependencyUnavailable, TableInUseError
from sharelake.run import preflight
from sharelake.run.pipeline import run_ingest
from sharelake.sink.delta.writer_lease import LEASE_SUFFIX, OLD_LEASE_FILE, LeaseLostError, WriterLease
from sharelake.table.location import TableLocation
from sharelake.testing.kafka_broker import EmbeddedKafka, free_port
from tests.job_runner import ROOT, JobSpec, drain_in_process, drain_job, kill_job, run_summary, start_job
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

LEASE_S = 6  # the writer lease's TTL: a restart after a kill -9 waits this long for the dead job's lease


@pytest.mark.long  # CI time: CI lands on S3 and races two jobs' leases (below); the kill and takeover run in chaos
def test_kill_mid_ingest_into_an_s3_table_then_restart(
    broker: EmbeddedKafka, spark: SparkSession, s3: EmbeddedS3, tmp_path: Path, unique: str
) -> None:
    bucket = s3.bucket(f"lake-{unique}")
    table = f"{bucket}/events"
    clock = f"{bucket}/_checkpoints/clock"
    spec = JobSpec(
        broker,
        f"s3-{unique}",
        f"g-{unique}",
        table,
        checkpoint=clock,
        s3=s3,
        settings=("delta.checkpoint_interval=2", f"delta.writer_lease_s={LEASE_S}"),
    )  # type: ignore[arg-type]
    broker.create_topic(spec.topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, spec.topic, 6000)

    # killed right after the second micro-batch's Delta commit, before its ACCEPTs
    rc = drain_job(spec, tmp_path / "run1.log", faults="kill@after_delta_commit#2")
    log1 = (tmp_path / "run1.log").read_text(errors="replace")
    assert rc != 0, log1[-2000:]
    rows_after_crash = spark.read.format("delta").load(table).count()
    assert 0 < rows_after_crash < 6000, log1[-2000:]

    # the restart: its dedup cache reads the commits from S3 and recognises the crashed batch
    assert drain_in_process(spark, spec, tmp_path / "run2.log") == 0, (tmp_path / "run2.log").read_text()[-3000:]
    second = run_summary(tmp_path / "run2.log")
    assert_exactly_once(spark, table, produced)  # type: ignore[arg-type]
    assert second["dedup_hits"] > 0
    assert "its holder is gone; taking it over" in (tmp_path / "run2.log").read_text()  # the dead job's lease
    logs = log1 + (tmp_path / "run2.log").read_text(errors="replace")
    assert "background, Delta Kernel)" in logs and "background checkpoint failed" not in logs
    jvm, hadoop = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    last = jvm.org.apache.hadoop.fs.Path(f"{table}/_delta_log/_last_checkpoint")  # type: ignore[union-attr]
    assert last.getFileSystem(hadoop).exists(last)


def test_a_second_job_on_the_same_s3_table_stops_at_start_and_a_taken_lease_stops_the_first(
    broker: EmbeddedKafka, spark: SparkSession, s3: EmbeddedS3, tmp_path: Path, unique: str
) -> None:
    """S3 gives Delta no mutual exclusion: two jobs appending to one table could overwrite each
    other's commit file. The second job (same share group, same table) stops at start naming the
    cause, before it joins the group. Then someone else takes the first job's lease: its next
    commit is refused and it stops at once (no write retries, each of which would cost the released
    records a delivery); the restart lands everything exactly once, nothing dead-lettered."""
    table = f"{s3.bucket(f'lake-{unique}')}/events"
    spec = JobSpec(
        broker, f"s3two-{unique}", f"g-{unique}", table, s3=s3, settings=(f"delta.writer_lease_s={LEASE_S}",)
    )  # type: ignore[arg-type]
    broker.create_topic(spec.topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, spec.topic, 4000)

    first_log = tmp_path / "first.log"
    first = start_job(spec, "run.mode=until-drained", "run.idle_timeout_ms=60000", log=first_log)
    try:
        jvm, hadoop = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        lease = jvm.org.apache.hadoop.fs.Path(TableLocation.at(table).beside(LEASE_SUFFIX))  # type: ignore[union-attr]
        fs = lease.getFileSystem(hadoop)
        wait_for(
            lambda: fs.exists(lease), 180, give_up=lambda: first.poll() is not None,
            failure=lambda: f"the first job took no writer lease in 180 s (exit {first.poll()}):\n"
            + first_log.read_text()[-3000:],
        )  # fmt: skip

        second = load_config(ROOT / "conf" / "local.toml", spec.sets("run.mode=until-drained"))
        with pytest.raises(TableInUseError) as refused:
            run_ingest(spark, second)
        assert str(refused.value).startswith(f"delta.table_path = {table!r} is written by another Sharelake job")
        assert "run one job per S3 table, or set Delta's S3DynamoDBLogStore" in str(refused.value)

        # someone else writes the lease over the first job's renewals, while more records arrive
        taken = json.dumps({"holder": "another-job", "host": "elsewhere", "pid": 1, "group": spec.group})
        for _ in range(12):
            stream = fs.create(lease, True)
            stream.write(bytearray(taken.encode()))
            stream.close()
            time.sleep(0.5)
        produced += produce_json_events(broker.bootstrap, spec.topic, 2000, start=4000)
        assert first.wait(180) != 0, first_log.read_text()[-3000:]
    finally:
        kill_job(first)
    log1 = first_log.read_text(errors="replace")
    assert f"the writer lease of {table} was taken by elsewhere" in log1, log1[-3000:]
    assert "records RELEASEd, retrying" not in log1, log1[-3000:]  # stopped at the first refused commit
    assert log1.rstrip().endswith("another job writes the table (or it was released by hand)"), log1[-3000:]

    restart = tmp_path / "restart.log"  # waits out the unrenewed lease, then takes it over
    assert drain_in_process(spark, spec, restart) == 0, restart.read_text()[-3000:]
    assert_exactly_once(spark, table, produced)  # type: ignore[arg-type]
    assert run_summary(restart)["dead_lettered"] == 0


def test_a_writer_lease_lets_commits_through_from_the_moment_it_is_held(
    spark: SparkSession, s3: EmbeddedS3, unique: str
) -> None:
    """A job commits right after it takes its lease (a restart with records waiting does), and at
    any moment after: the lease never looks stale to its own holder while the renewals run. (Its
    read-back once counted against it, and the first renewal came a full TTL/3 after that, so a
    commit in between was refused as if another job might have taken over.)"""
    lease = WriterLease(
        spark, TableLocation.at(f"{s3.bucket(f'lake-{unique}')}/events"), "delta.table_path", LEASE_S, "g"
    )
    lease.acquire()
    try:
        start = time.monotonic()
        checked = [start]
        while checked[-1] < start + 2 * LEASE_S:  # through several renewals (one every LEASE_S / 3)
            lease.check()  # raises LeaseLostError when stale
            checked.append(time.monotonic())
            time.sleep(0.05)
        # every renewal period was checked (a check took under a renewal period): no moment went unproven
        slowest = max(b - a for a, b in pairwise(checked))
        if slowest >= LEASE_S / 3:
            pytest.fail(f"scenario not provoked: a lease check took {slowest:.1f} s, a whole renewal period")
    finally:
        lease.release()
    jvm, hadoop = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    path = jvm.org.apache.hadoop.fs.Path(lease.location.beside(LEASE_SUFFIX))  # type: ignore[union-attr]
    assert not path.getFileSystem(hadoop).exists(path)  # released: a successor starts at once


def test_a_writer_lease_read_while_its_holder_renews_it_is_read_again(
    spark: SparkSession, s3: EmbeddedS3, unique: str
) -> None:
    """A job starting on a table reads the lease while its holder rewrites it (a renewal): S3A then
    refuses the rest of the read (HTTP 412, the ETag changed). It must read again, not fail: a
    second job across a network (tests/test_network_storage.py) failed its start on it with a
    stack trace instead of the one line naming the holder."""
    location = TableLocation.at(f"{s3.bucket(f'lake-{unique}')}/events")
    holder = WriterLease(spark, location, "delta.table_path", LEASE_S, "g-holder")
    reader = WriterLease(spark, location, "delta.table_path", LEASE_S, "g-reader")
    holder._write()
    stop = threading.Event()

    def renew_over_and_over() -> None:  # far more often than a holder does (every TTL / 3)
        while not stop.wait(0.05):
            holder._write()

    renewals = threading.Thread(target=renew_over_and_over)
    renewals.start()
    refused = 0
    try:
        for _ in range(300):
            try:  # one read, as before the fix: the race is provoked when some are refused
                reader._read_once()
            except Exception as e:  # noqa: BLE001 - counted and checked below
                assert "Status Code: 412" in str(e), e
                refused += 1
            seen = reader._read()  # what the start reads: never refused
            assert seen is not None and seen["holder"] == holder.holder
    finally:
        stop.set()
        renewals.join(30)
    if refused == 0:
        pytest.fail("scenario not provoked: no read met a renewal in 300 tries")


def test_a_writer_lease_whose_renewals_stall_refuses_commits_and_names_the_stall(
    spark: SparkSession, s3: EmbeddedS3, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renewal due later than 2/3 of the TTL (the job stalled: a long GC pause, a hung store
    call) is not made: another job may be about to take the table over. Commits are refused from
    the moment the lease is 2/3 TTL old, and once the late renewal comes due the lease is lost for
    good, with a line naming the stall."""
    lease = WriterLease(
        spark, TableLocation.at(f"{s3.bucket(f'lake-{unique}')}/events"), "delta.table_path", LEASE_S, "g"
    )
    lease.acquire()
    try:
        lease.check()  # fresh
        faults.reset()
        monkeypatch.setenv(faults.ENV, f"delay@before_lease_renewal={LEASE_S * 5 / 6}")
        refusals: list[str] = []

        def lost_naming_the_stall() -> bool:
            try:
                lease.check()
            except LeaseLostError as e:
                refusals.append(str(e))
            return any("without a renewal" in r for r in refusals)

        wait_for(
            lost_naming_the_stall, 3 * LEASE_S, interval_s=0.1,
            failure=lambda: f"the stalled lease was not lost naming the stall in {3 * LEASE_S} s: refusals {refusals}",
        )  # fmt: skip
    finally:
        lease.release()
    assert refusals, "the stalled lease still let commits through"
    assert "was last renewed" in refusals[0], refusals[0]  # stale before the late renewal came due
    assert "without a renewal" in refusals[-1] and "this job stalled" in refusals[-1], refusals[-1]


def test_an_s3_table_path_with_a_trailing_slash_lands_where_the_path_without_it_does(
    broker: EmbeddedKafka, spark: SparkSession, s3: EmbeddedS3, tmp_path: Path, unique: str
) -> None:
    """`delta.table_path = "s3a://bucket/events/"` is the table `s3a://bucket/events`: its writer
    lease, its writer and its dead-letter table (`s3a://bucket/events_dead_letter`) all take the
    one location. (The writers were once keyed by the path as given and the leases by the path
    stripped of its slash: the job failed at start with a KeyError.)"""
    table = f"{s3.bucket(f'lake-{unique}')}/events"
    spec = JobSpec(
        broker, f"s3slash-{unique}", f"g-{unique}", f"{table}/", s3=s3, settings=(f"delta.writer_lease_s={LEASE_S}",)
    )  # type: ignore[arg-type]
    broker.create_topic(spec.topic, partitions=1)
    produced = produce_json_events(broker.bootstrap, spec.topic, 500)

    log = tmp_path / "run.log"
    assert drain_in_process(spark, spec, log) == 0, log.read_text()[-3000:]
    assert_exactly_once(spark, table, produced)  # type: ignore[arg-type]
    assert run_summary(log)["dead_lettered"] == 0
    assert f"-> table {table}, payload raw" in log.read_text()  # the banner names the table once, normalised
    assert f"dead letters {table}_dead_letter\n" in log.read_text()


def test_an_s3_store_that_does_not_answer_at_start_is_an_outage_and_a_host_that_does_not_resolve_is_not(
    spark: SparkSession, s3: EmbeddedS3, unique: str
) -> None:
    """The start-up check of a table path on S3 tells an outage (the store refuses the connection:
    waited for, `sharelake.failures.dependency_wait`) from a wrong setting (an endpoint whose host does not
    resolve: one line, exit 2). Per-bucket S3A settings point two buckets elsewhere, with S3A's
    retries off so each check fails at once."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    down, unknown = f"down-{unique}", f"unknown-{unique}"
    endpoints = {down: f"http://127.0.0.1:{free_port()}", unknown: "http://no-such-store.invalid:9000"}
    for bucket, endpoint in endpoints.items():
        for key, value in {
            "endpoint": endpoint, "retry.limit": "0", "attempts.maximum": "0",
            "connection.establish.timeout": "2s", "retry.throttle.limit": "0",
        }.items():  # fmt: skip
            hadoop.set(f"fs.s3a.bucket.{bucket}.{key}", value)
    with pytest.raises(DependencyUnavailable) as outage:
        preflight.check_table_path(spark, TableLocation.at(f"s3a://{down}/events"))
    assert str(outage.value).startswith(f"delta.table_path = 's3a://{down}/events': the table's store did not answer")
    with pytest.raises(ConfigError) as wrong:
        preflight.check_table_path(spark, TableLocation.at(f"s3a://{unknown}/events"))
    assert str(wrong.value).startswith(f"delta.table_path = 's3a://{unknown}/events': not writable"), str(wrong.value)


def test_a_partitioned_and_a_clustered_table_on_s3_get_their_layout_from_the_first_commit_under_the_lease(
    broker: EmbeddedKafka, spark: SparkSession, s3: EmbeddedS3, tmp_path: Path, unique: str
) -> None:
    """On S3 the job holds each table's writer lease before it creates the table: Delta's create of
    a table with a layout then runs with the lease file already there, and any file in a table's
    folder before its first commit makes Delta's `createIfNotExists` skip the create (the table
    would then be made by a plain append, with no layout, and nothing would say so). One routed job,
    two new tables on S3: one partitioned by a generated day, one clustered. What a user checks:
    each table's layout in its Delta log from version 0 on, every record once, nothing left."""
    bucket = s3.bucket(f"lake-{unique}")
    by_day, by_partition = f"s3day-{unique}", f"s3clu-{unique}"
    tables = {by_day: f"{bucket}/by_day", by_partition: f"{bucket}/by_partition"}
    produced = {}
    for topic in tables:
        broker.create_topic(topic, partitions=2)
        produced[topic] = produce_json_events(broker.bootstrap, topic, 300)
    spec = JobSpec(
        broker, "", f"g-{unique}", f"{bucket}/dead_letter", s3=s3, routes=tables,  # type: ignore[arg-type]
        settings=(
            f"delta.writer_lease_s={LEASE_S}",
            f'topics.{by_day}.partition_by=["day"]',
            f"topics.{by_day}.generated_columns.day=CAST(kafka_timestamp AS DATE)",
            f'topics.{by_partition}.cluster_by=["partition"]',
        ),
    )  # fmt: skip

    log = tmp_path / "run.log"
    assert drain_in_process(spark, spec, log) == 0, log.read_text()[-3000:]
    for table in tables.values():
        assert f"{table}: writer lease held" in log.read_text()  # the lease was there before the create

    layouts = {}
    for topic, table in tables.items():
        detail = DeltaTable.forPath(spark, table).detail().first()
        assert detail is not None
        first = DeltaTable.forPath(spark, table).history().where("version = 0").first()
        assert first is not None
        layouts[topic] = (list(detail["partitionColumns"]), list(detail["clusteringColumns"]), first["operation"])
        assert_exactly_once(spark, table, produced[topic])
        assert nothing_left(broker, topic, spec.group)
    assert layouts == {
        by_day: (["day"], [], "CREATE TABLE"),
        by_partition: ([], ["partition"], "CREATE TABLE"),
    }, layouts
    day = spark.read.format("delta").load(tables[by_day])
    assert day.where("day IS NULL OR day <> CAST(kafka_timestamp AS DATE)").count() == 0


def test_a_lease_an_older_version_kept_inside_the_table_is_waited_out_then_removed(
    spark: SparkSession, s3: EmbeddedS3, unique: str
) -> None:
    """Older versions kept the lease at `<table>/_sharelake/writer-lease.json`. A job of this version
    started while such a job still runs (a rolling upgrade) must not write beside it: renewed there,
    it is refused at start as for any live holder. Once that job is gone (its lease unrenewed for its
    TTL) the new job takes its own lease and removes the old one, so the table's folder holds nothing
    of ours before its first commit."""
    location = TableLocation.at(f"{s3.bucket(f'lake-{unique}')}/events")
    jvm, hadoop = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    old = jvm.org.apache.hadoop.fs.Path(location.file(OLD_LEASE_FILE))  # type: ignore[union-attr]
    fs = old.getFileSystem(hadoop)
    ttl = 3.0
    stop = threading.Event()

    def older_job_renewing() -> None:
        renewals = 0
        while not stop.is_set():
            renewals += 1
            body = {"holder": "older", "renewals": renewals, "ttl_s": ttl, "host": "old-host", "pid": 7, "group": "g"}
            stream = fs.create(old, True)
            stream.write(bytearray(json.dumps(body).encode()))
            stream.close()
            stop.wait(ttl / 3)

    renewing = threading.Thread(target=older_job_renewing)
    renewing.start()
    try:
        wait_for(lambda: fs.exists(old), 10, "the older job wrote no lease in 10 s")
        with pytest.raises(TableInUseError, match="old-host, pid 7"):
            WriterLease(spark, location, "delta.table_path", LEASE_S, "g").acquire()
    finally:
        stop.set()
        renewing.join(10)

    lease = WriterLease(spark, location, "delta.table_path", LEASE_S, "g")  # the older job is gone now
    lease.acquire()
    try:
        table_folder = jvm.org.apache.hadoop.fs.Path(location.path)  # type: ignore[union-attr]
        assert not fs.exists(old)
        assert not fs.exists(table_folder) or not list(fs.listStatus(table_folder))
        assert fs.exists(jvm.org.apache.hadoop.fs.Path(location.beside(LEASE_SUFFIX)))  # type: ignore[union-attr]
    finally:
        lease.release()
