"""Two writers commit the same offsets: the later commit deletes its copies (real Delta table).

This is what happens when one job's batch outlives its record locks and another job in the same
share group acquires, writes and ACCEPTs those records first. Two sinks with their own dedup
caches write one table; the race is made deterministic by running writer B's whole micro-batch
at writer A's `before_delta_commit` point (A planned before B committed). The records are
stand-ins: the repair is a Delta matter, and the Kafka side of the race (expired locks, two
jobs) is proven with real jobs in `test_two_jobs_one_partition.py`.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from app import faults
from app.acknowledge.lifecycle import AckCommand, PollBatch
from app.acknowledge.proof import RecordState
from app.bridge.arrow_rows import poll_rows
from app.bridge.record_buffer import Poll, RecordBuffer
from app.config import BatchConfig
from app.embedded.sample_data import Produced
from app.sink.commit_log import DeltaCommitLog
from app.sink.dedup_cache import DedupCache
from app.sink.delta_sink import DeltaSink
from app.sink.destinations import Destination, dead_letter_table, main_table
from app.sink.formats.raw import RawFormat, RawSettings
from tests.table_checks import assert_exactly_once
from tests.test_dedup_cache import holds
from tests.test_lifecycle import state_of

TOPIC = "race"


@dataclass
class Rec:
    """A polled record as the sink sees it."""

    off: int

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.off

    def key(self) -> bytes:
        return b"k%d" % self.off

    def value(self) -> bytes:
        return b'{"n": %d}' % self.off

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def delivery_count(self) -> int:
        return 1


def produced(offsets: range) -> list[Produced]:
    return [Produced(TOPIC, 0, o, Rec(o).key(), Rec(o).value()) for o in offsets]


class Writer:
    """One job's sink, with its own buffer and dedup cache."""

    def __init__(self, spark: SparkSession, table: Path, attempts: int = 3):
        self.spark = spark
        self.buffer = RecordBuffer(100_000)
        fmt = RawFormat(RawSettings())
        self.table = main_table(spark, str(table), fmt, checkpoint_every=100, lookback_commits=1000)
        self.table.load()
        self.cache = self.table.cache  # the tests look into it
        dead = dead_letter_table(spark, f"{table}_dead_letter", checkpoint_every=100, lookback_commits=1000)
        self.sink = DeltaSink(
            self.buffer,
            [Destination((TOPIC,), self.table, fmt)],
            dead,
            BatchConfig(max_wait_ms=0, write_attempts=attempts),
            max_delivery_count=4,
            lock_duration_s=30.0,
            job_name="test",
        )
        self.polls: list[PollBatch] = []

    def poll(self, offsets: range) -> PollBatch:
        commands: queue.Queue[AckCommand] = queue.Queue()
        records: Any = [Rec(o) for o in offsets]
        batch = PollBatch(member_id=0, records=records, commands=commands)
        assert self.buffer.put(Poll(batch, poll_rows(records)), 1)
        self.polls.append(batch)
        return batch

    def micro_batch(self) -> None:
        self.sink(self.spark.range(1), 0)


@pytest.fixture
def before_commit(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], None]], None]]:
    """Run a callback once, at the next `before_delta_commit` point."""
    faults.reset()
    monkeypatch.delenv(faults.ENV, raising=False)
    pending: list[Callable[[], None]] = []
    original = faults.hit

    def hit(point: str) -> None:
        if point == "before_delta_commit" and pending:
            pending.pop()()
        original(point)

    monkeypatch.setattr(faults, "hit", hit)
    yield pending.append
    faults.reset()


def states(batch: PollBatch) -> set[RecordState]:
    return {state_of(batch, i) for i in range(len(batch))}


def test_the_later_commit_deletes_its_copies_of_offsets_another_writer_committed_first(
    spark: SparkSession, tmp_path: Path, before_commit: Callable[[Callable[[], None]], None]
) -> None:
    table = tmp_path / "t"
    a, b = Writer(spark, table), Writer(spark, table)
    a_poll = a.poll(range(0, 100))
    b.poll(range(50, 150))  # 50..99 were redelivered to B after A's locks expired
    before_commit(b.micro_batch)  # B writes and ACCEPTs while A is about to commit
    a.micro_batch()

    assert b.table.stats.rows == 100 and b.table.stats.concurrent_duplicates == 0
    assert a.table.stats.rows == 100  # A wrote its stale plan: 50 duplicates for a moment ...
    assert a.table.stats.concurrent_duplicates == 50
    assert a.table.stats.duplicates_repaired == 50  # ... and deleted them again
    assert states(a_poll) == {RecordState.ACCEPTED}
    assert_exactly_once(spark, table, produced(range(0, 150)))
    # B's rows for 50..99 are the ones kept (B committed first)
    kept = spark.read.format("delta").load(str(table)).where("offset BETWEEN 50 AND 99").select("ingested_at")
    b_rows = spark.read.format("delta").load(str(table)).where("offset >= 100").select("ingested_at").distinct()
    assert kept.distinct().collect() == b_rows.collect()
    # the repair is a commit of its own that a restarted job's cache reads as done
    restarted = DedupCache(DeltaCommitLog(spark, str(table)))
    restarted.load()
    assert restarted.repairs() == []


def test_a_failed_repair_is_retried_before_the_next_write(
    spark: SparkSession,
    tmp_path: Path,
    before_commit: Callable[[Callable[[], None]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = tmp_path / "t"
    a, b = Writer(spark, table), Writer(spark, table)
    a_poll = a.poll(range(0, 100))
    b.poll(range(0, 100))
    before_commit(b.micro_batch)
    monkeypatch.setenv(faults.ENV, "error@before_repair#1")
    a.micro_batch()

    assert a.sink.stats.failed_attempts == 1  # the repair failed once: A's records were RELEASEd ...
    assert states(a_poll) == {RecordState.RELEASED}
    assert a.table.stats.duplicates_repaired == 100  # ... and the next attempt repaired first
    assert_exactly_once(spark, table, produced(range(0, 100)))


def test_duplicates_left_by_a_writer_that_died_before_repairing_are_deleted_at_the_next_start(
    spark: SparkSession,
    tmp_path: Path,
    before_commit: Callable[[Callable[[], None]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = tmp_path / "t"
    a, b = Writer(spark, table, attempts=1), Writer(spark, table)
    a.poll(range(0, 80))
    b.poll(range(40, 120))
    before_commit(b.micro_batch)
    monkeypatch.setenv(faults.ENV, "error@before_repair#9")  # A never gets to repair (as if killed)
    with pytest.raises(faults.InjectedFault):
        a.micro_batch()
    rows = spark.read.format("delta").load(str(table))
    assert rows.count() == 160 and rows.select("offset").distinct().count() == 120  # 40 duplicates left

    monkeypatch.delenv(faults.ENV)
    restarted = Writer(spark, table)  # the next start, of either job
    assert [r.count() for r in restarted.cache.repairs()] == [40]
    restarted.sink.repair_pending()
    assert restarted.table.stats.duplicates_repaired == 40
    assert_exactly_once(spark, table, produced(range(0, 120)))


def test_a_writer_that_dies_right_after_its_repair_delete_leaves_nothing_to_redo(
    spark: SparkSession,
    tmp_path: Path,
    before_commit: Callable[[Callable[[], None]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The crash falls between the repair's DELETE commit and the writer noting it: the next start
    reads the repair commit from the log and neither deletes again nor leaves a duplicate."""
    table = tmp_path / "t"
    a, b = Writer(spark, table, attempts=1), Writer(spark, table)
    a.poll(range(0, 80))
    b.poll(range(40, 120))
    before_commit(b.micro_batch)
    monkeypatch.setenv(faults.ENV, "error@after_repair#9")
    with pytest.raises(faults.InjectedFault):
        a.micro_batch()
    assert_exactly_once(spark, table, produced(range(0, 120)))  # the DELETE had landed

    monkeypatch.delenv(faults.ENV)
    restarted = Writer(spark, table)
    assert restarted.cache.repairs() == []  # the repair commit names the version it repaired
    restarted.sink.repair_pending()
    assert restarted.table.stats.duplicates_repaired == 0
    assert_exactly_once(spark, table, produced(range(0, 120)))


def test_another_writers_commit_between_two_of_ours_is_folded_before_the_next_decision(
    spark: SparkSession, tmp_path: Path, before_commit: Callable[[Callable[[], None]], None]
) -> None:
    """Our writer learns its own commits locally; another writer's commit in between (a version gap)
    must still reach the dedup cache, so a redelivery of one of its records is not written again."""
    table = tmp_path / "t"
    a, b = Writer(spark, table), Writer(spark, table)
    a.poll(range(0, 100))
    a.micro_batch()  # v0, A's own: known without reading the log
    a.poll(range(100, 200))
    b.poll(range(200, 300))
    before_commit(b.micro_batch)  # B commits v1 after A planned: A's commit becomes v2, a gap at v1
    a.micro_batch()
    assert a.cache.version == 2 and holds(a.cache, TOPIC, 0, 250)  # the gap was read when A committed v2

    # B's records come back to A (say B's ACCEPTs were lost): decided from the cache, not written
    a_poll = a.poll(range(250, 300))
    rows_before = a.table.stats.rows
    a.micro_batch()
    assert a.sink.stats.dedup_hits == 50 and a.table.stats.rows == rows_before
    assert states(a_poll) == {RecordState.ACCEPTED}
    assert a.table.stats.concurrent_duplicates == 0
    assert_exactly_once(spark, table, produced(range(0, 300)))
