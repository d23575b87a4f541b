"""Two writers on one table claim the same offsets: no commit ever holds one twice (real Delta table).

This is what happens when one job's batch outlives its record locks and another job in the same
share group acquires, writes and ACCEPTs those records first. Two sinks with their own dedup
caches write one table; the race is made deterministic by running writer B's whole micro-batch
at a point of writer A's append: `before_delta_commit` (A planned, its transaction has not started:
A's check on the snapshot finds B's commit) or `delta_files_written` (A's files are written, not
committed: Delta fails A's commit and A checks again). Either way A decides the taken records on
B's commit and writes only the rest. The records are stand-ins: the race is a Delta matter, and
its Kafka side (expired locks, two jobs) is proven with real jobs in `test_two_jobs_one_partition.py`.

Tables written by an older Sharelake (blind appends, never checked against each other) can hold
duplicates; the start-up repair deletes them. Such an older writer's commit is made here as it
made it: a plain Delta append with its userMetadata.
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devkit.sample_data import Produced
from sharelake.acknowledge.lifecycle import AckCommand, PollBatch
from sharelake.acknowledge.proof import RecordState
from sharelake.acknowledge.window import DecisionWindow
from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.record_buffer import Poll, RecordBuffer
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.config.settings import BatchConfig
from sharelake.failures import faults
from sharelake.formats.raw import RawFormat, RawSettings
from sharelake.sink.batch.delta_sink import DeltaSink
from sharelake.sink.dead_letter.sinks import DeltaDeadLetters, dead_letter_table
from sharelake.sink.dedup.commit_log import user_metadata_json
from sharelake.sink.dedup.dedup_table import micros
from sharelake.sink.write.destinations import Destination, main_table
from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import BatchOffsets, OffsetRanges
from tests.table_checks import assert_exactly_once
from tests.test_dedup_cache import holds
from tests.test_lifecycle import state_of

TOPIC = "race"


def record(offset: int) -> SyntheticRecord:
    """A polled record as the sink sees it."""
    key, value = b"k%d" % offset, b'{"n": %d}' % offset
    return SyntheticRecord(TOPIC, 0, offset, key=key, value=value, timestamp_ms=1_700_000_000_000)


def produced(offsets: Iterable[int]) -> list[Produced]:
    return [Produced(TOPIC, 0, o, record(o).key(), record(o).value()) for o in offsets]


class Writer:
    """One job's sink, with its own buffer and dedup cache."""

    def __init__(self, spark: SparkSession, table: Path, attempts: int = 3):
        self.spark = spark
        self.buffer = RecordBuffer(100_000)
        fmt = RawFormat(RawSettings())
        main = main_table(spark, TableLocation.at(table), fmt, checkpoint_every=100, lookback_commits=1000)
        self.table = main.table
        self.table.load()
        dead = dead_letter_table(
            spark, TableLocation.at(table).dead_letter(), checkpoint_every=100, lookback_commits=1000
        )
        self.sink = DeltaSink(
            self.buffer,
            [Destination.of((TOPIC,), main, fmt)],
            DeltaDeadLetters(dead.table, dead.frames),
            BatchConfig(max_wait_ms=0, write_attempts=attempts),
            max_delivery_count=4,
            window=DecisionWindow.record_lock(30.0),
            job_name="test",
        )
        self.polls: list[PollBatch] = []

    def poll(self, offsets: range) -> PollBatch:
        commands: queue.Queue[AckCommand] = queue.Queue()
        records: Any = [record(o) for o in offsets]
        batch = PollBatch(member_id=0, records=records, commands=commands)
        assert self.buffer.put(Poll(batch, poll_rows(records)), 1)
        self.polls.append(batch)
        return batch

    def micro_batch(self) -> None:
        self.sink(self.spark.range(1), 0)


@pytest.fixture
def at_point(
    clean_faults: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str, Callable[[], None]], None]]:
    """Run a callback once, at the next hit of a fault point (none armed before: `clean_faults`)."""
    pending: dict[str, Callable[[], None]] = {}
    original = faults.hit

    def hit(point: str) -> None:
        callback = pending.pop(point, None)
        if callback is not None:
            callback()
        original(point)

    monkeypatch.setattr(faults, "hit", hit)
    yield pending.__setitem__
    faults.reset()


def states(batch: PollBatch) -> set[RecordState]:
    return {state_of(batch, i) for i in range(len(batch))}


def operations(spark: SparkSession, table: Path) -> list[str]:
    return [r.operation for r in DeltaTable.forPath(spark, str(table)).history().collect()]


def older_version_append(spark: SparkSession, table: Path, offsets: range) -> None:
    """What a Sharelake before this change committed for `offsets`: a blind append of its rows (here
    copies of the rows the table has for them, with the write's own stamp) and its claim."""
    stamp = datetime.now(UTC)
    rows = (
        spark.read.format("delta")
        .load(str(table))
        .where(f"offset BETWEEN {offsets.start} AND {offsets.stop - 1}")
        .withColumn("ingested_at", F.lit(stamp))
    )
    claim = BatchOffsets({(TOPIC, 0): OffsetRanges([(offsets.start, offsets.stop - 1)])})
    metadata = user_metadata_json(uuid.uuid4().hex, 7, claim, micros(stamp))
    rows.write.format("delta").mode("append").option("userMetadata", metadata).save(str(table))


def race(
    spark: SparkSession, table: Path, at_point: Callable[[str, Callable[[], None]], None], point: str, b_offsets: range
) -> tuple[Writer, Writer, PollBatch]:
    """A's first commit creates the table; then A plans 10..99 and B's micro-batch of `b_offsets`
    runs at `point` of A's next append, which is a checked transaction."""
    a, b = Writer(spark, table), Writer(spark, table)
    a.poll(range(0, 10))
    a.micro_batch()
    a_poll = a.poll(range(10, 100))
    b.poll(b_offsets)
    at_point(point, b.micro_batch)
    a.micro_batch()
    return a, b, a_poll


@pytest.mark.parametrize(
    ("point", "conflicts"),
    [
        ("before_delta_commit", 0),  # B commits before A's transaction starts: A's check finds it
        ("delta_files_written", 1),  # B commits while A's files are written: Delta refuses A's commit
    ],
)
def test_offsets_another_writer_committed_after_our_plan_are_decided_on_its_commit_not_written_again(
    point: str,
    conflicts: int,
    spark: SparkSession,
    tmp_path: Path,
    at_point: Callable[[str, Callable[[], None]], None],
) -> None:
    table = tmp_path / "t"
    a, b, a_poll = race(spark, table, at_point, point, range(50, 150))  # 50..99 redelivered to B: A's locks expired

    assert b.table.stats.rows == 100 and a.table.stats.commit_conflicts == conflicts
    assert a.table.stats.concurrent_claims == 50  # A found them in B's commit ...
    assert a.table.stats.rows == 10 + 40  # ... and wrote only 10..49
    assert states(a_poll) == {RecordState.ACCEPTED}
    assert_exactly_once(spark, table, produced(range(0, 150)))
    assert "DELETE" not in operations(spark, table) and a.table.repairs() == []


def test_a_conflict_over_other_offsets_commits_the_same_files_again(
    spark: SparkSession, tmp_path: Path, at_point: Callable[[str, Callable[[], None]], None]
) -> None:
    table = tmp_path / "t"
    a, _, _ = race(spark, table, at_point, "delta_files_written", range(100, 200))

    assert a.table.stats.commit_conflicts == 1 and a.table.stats.concurrent_claims == 0
    assert a.table.stats.commit_conflict_s > 0  # the re-check and the second commit, timed
    assert a.table.stats.rows == 100 and a.sink.stats.failed_attempts == 0
    assert_exactly_once(spark, table, produced(range(0, 200)))
    assert operations(spark, table).count("WRITE") == 3  # one commit each, A's second after B's


def test_an_append_that_dies_between_a_conflict_and_its_second_commit_leaves_nothing_behind(
    spark: SparkSession,
    tmp_path: Path,
    at_point: Callable[[str, Callable[[], None]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault falls after Delta refused A's commit, before A commits its files again: nothing
    references them, A's records are RELEASEd, and once redelivered they are written once."""
    table = tmp_path / "t"
    monkeypatch.setenv(faults.ENV, "error@before_delta_recommit#1")
    a, _, a_poll = race(spark, table, at_point, "delta_files_written", range(100, 200))

    assert a.table.stats.commit_conflicts == 1 and a.sink.stats.failed_attempts >= 1
    assert states(a_poll) == {RecordState.RELEASED}
    assert_exactly_once(spark, table, produced([*range(0, 10), *range(100, 200)]))  # A's files unreferenced

    monkeypatch.delenv(faults.ENV)
    redelivered = a.poll(range(10, 100))  # the share group delivers them again
    a.micro_batch()
    assert states(redelivered) == {RecordState.ACCEPTED}
    assert_exactly_once(spark, table, produced(range(0, 200)))


def test_duplicates_an_older_version_left_unrepaired_are_deleted_at_the_next_start(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    a = Writer(spark, table)
    a.poll(range(0, 120))
    a.micro_batch()
    older_version_append(spark, table, range(40, 80))  # it lost the race and died before its repair
    rows = spark.read.format("delta").load(str(table))
    assert rows.count() == 160 and rows.select("offset").distinct().count() == 120

    restarted = Writer(spark, table)  # the next start
    assert [r.count() for r in restarted.table.repairs()] == [40]
    restarted.sink.repair_pending()
    assert restarted.table.stats.duplicates_repaired == 40
    assert_exactly_once(spark, table, produced(range(0, 120)))


def test_a_start_up_repair_that_dies_right_after_its_delete_leaves_nothing_to_redo(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash falls between the repair's DELETE commit and the writer noting it: the next start
    reads the repair commit from the log and neither deletes again nor leaves a duplicate."""
    table = tmp_path / "t"
    a = Writer(spark, table)
    a.poll(range(0, 120))
    a.micro_batch()
    older_version_append(spark, table, range(40, 80))
    monkeypatch.setenv(faults.ENV, "error@after_repair#9")
    with pytest.raises(faults.InjectedFault):
        Writer(spark, table).sink.repair_pending()
    assert_exactly_once(spark, table, produced(range(0, 120)))  # the DELETE had landed

    monkeypatch.delenv(faults.ENV)
    restarted = Writer(spark, table)
    assert restarted.table.repairs() == []  # the repair commit names the version it repaired
    restarted.sink.repair_pending()
    assert restarted.table.stats.duplicates_repaired == 0
    assert_exactly_once(spark, table, produced(range(0, 120)))


def test_another_writers_commit_between_two_of_ours_is_folded_before_the_next_decision(
    spark: SparkSession, tmp_path: Path, at_point: Callable[[str, Callable[[], None]], None]
) -> None:
    """Our writer learns its own commits locally; another writer's commit in between (a version gap)
    must still reach the dedup cache, so a redelivery of one of its records is not written again."""
    table = tmp_path / "t"
    a, b = Writer(spark, table), Writer(spark, table)
    a.poll(range(0, 100))
    a.micro_batch()  # v0, A's own: known without reading the log
    a.poll(range(100, 200))
    b.poll(range(200, 300))
    at_point("before_delta_commit", b.micro_batch)  # B commits v1 after A planned: A's commit becomes v2
    a.micro_batch()
    assert a.table.version == 2 and holds(a.table, TOPIC, 0, 250)  # B's v1 was read when A checked

    # B's records come back to A (say B's ACCEPTs were lost): decided from the cache, not written
    a_poll = a.poll(range(250, 300))
    rows_before = a.table.stats.rows
    a.micro_batch()
    assert a.sink.stats.dedup_hits == 50 and a.table.stats.rows == rows_before
    assert states(a_poll) == {RecordState.ACCEPTED}
    assert a.table.stats.concurrent_claims == 0
    assert_exactly_once(spark, table, produced(range(0, 300)))
