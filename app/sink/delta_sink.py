"""The foreachBatch function: drain the RecordBuffer, dedup, classify, commit, then ACCEPT / REJECT.

Spark calls `DeltaSink.__call__` in the driver once per micro-batch of the clock stream (its
DataFrame is ignored). One attempt:

1. take whole polls from the buffer;
2. fold both tables' new commits (ours and other writers') into their dedup caches, then sort each
   record: already in the main table (ACCEPT, no write), already in the dead-letter table (REJECT,
   no write), a second copy inside this micro-batch (decided like the first), or a candidate;
3. classify the candidates (`app.sink.payload`: Arrow checks on the driver, then Spark for text
   and JSON): good ones become main-table rows, bad ones dead-letter rows with their error class;
4. one append to each table that has rows (`app.sink.dedup_table`: its commit is found by
   `write_id`, and copies another writer committed first are deleted again);
5. ACCEPT the good records with the main commit's `CommitProof`, REJECT the bad ones with the
   dead-letter commit's (INVARIANT 1 holds for both tables); count late ACCEPTs.

A failed attempt RELEASEs the attempt's undecided records (never ACCEPTs or REJECTs them) and is
retried with exponential backoff (tenacity) on whatever the buffer holds then; after
`batch.write_attempts` failures in a row the error propagates and the query (and job) fails.
A record that keeps failing comes back with a higher delivery count and is dead-lettered at
`dead_letter.max_delivery_count`, before the broker would archive it unseen.

No `txnAppId`/`txnVersion` keyed on the Spark batch id: after a crash Spark re-runs the last
batch id with whatever the buffer holds now, and Delta would silently skip that write; the
records' own identity in the dedup caches makes the re-run safe instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
from confluent_kafka import Message
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from app import faults
from app.acknowledge.lifecycle import CommitProof, PollBatch
from app.bridge.arrow_rows import records_to_arrow
from app.bridge.record_buffer import RecordBuffer
from app.config import BatchConfig
from app.sink.commit_log import PartitionKey
from app.sink.dead_letter import dead_letter_rows
from app.sink.dedup_table import DedupTable
from app.sink.payload import ERROR_CLASS, ERROR_MESSAGE, BadRecord, PayloadReader, precheck

log = logging.getLogger(__name__)

RecordKey = tuple[str, int, int]
FIRST_SEEN_MAX = 100_000  # records remembered from failed attempts, for the dead-letter first_seen


# the steps of one attempt, in order, that `SinkStats.phase_s` times
PHASES = (
    "drain",  # waiting for the buffer's polls
    "plan",  # refreshing the dedup caches and sorting records (present / parked / copies / candidates)
    "classify",  # records -> Arrow, the driver checks, and Spark's pass for text and JSON
    "write",  # the Delta append(s), finding our commit in the log, and any repair
    "decide",  # ACCEPT / REJECT commands to the members
)


@dataclass
class SinkStats:
    dedup_hits: int = 0  # records already in the table: ACCEPTed without a write
    in_batch_duplicates: int = 0  # second copies inside one micro-batch: decided like the first
    dead_lettered: int = 0  # records written to the dead-letter table (and REJECTed)
    dead_letter_hits: int = 0  # records already in the dead-letter table: REJECTed without a write
    error_classes: Counter[str] = field(default_factory=Counter)
    late_accepts: int = 0  # ACCEPTed after the record lock duration: the ACCEPT likely failed
    failed_attempts: int = 0
    empty_batches: int = 0
    max_cycle_s: float = 0.0  # longest acquire -> decision time of any poll
    last_cycle_s: float = 0.0  # the same, for the last micro-batch with records
    cycle_s_sum: float = 0.0  # of last_cycle_s over the micro-batches with records ...
    cycles: int = 0  # ... and how many (mean_cycle_s = cycle_s_sum / cycles)
    records_in: int = 0  # records drained into micro-batches (attempts that failed included)
    # seconds spent per step of an attempt, summed (see PHASES): where a batch cycle goes
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))


@contextmanager
def _timed(stats: SinkStats, phase: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        stats.phase_s[phase] += time.perf_counter() - start


@dataclass
class _Plan:
    """How one attempt decides each drained record."""

    candidates: list[tuple[PollBatch, int, RecordKey]] = field(default_factory=list)
    copies: list[tuple[PollBatch, int, RecordKey]] = field(default_factory=list)
    present: list[tuple[PollBatch, int]] = field(default_factory=list)
    parked: list[tuple[PollBatch, int]] = field(default_factory=list)


class DeltaSink:
    def __init__(
        self,
        buffer: RecordBuffer,
        main: DedupTable,
        dead: DedupTable,
        batch: BatchConfig,
        reader: PayloadReader,
        max_delivery_count: int,
        lock_duration_s: float,
        job_name: str,
    ):
        self.buffer = buffer
        self.main = main
        self.dead = dead
        self.batch = batch
        self.reader = reader
        self.max_delivery_count = max_delivery_count
        self.lock_duration_s = lock_duration_s
        self.job_name = job_name
        self.stats = SinkStats()
        self._closed = threading.Event()
        self._first_seen: dict[RecordKey, datetime] = {}

    def close(self) -> None:
        """From now on micro-batches write nothing (used while the job stops)."""
        self._closed.set()

    def repair_pending(self, spark: SparkSession) -> None:
        """At start: duplicates that a writer which died before repairing them left in either table."""
        self.main.repair_pending(spark)
        self.dead.repair_pending(spark)

    def __call__(self, clock_df: DataFrame, batch_id: int) -> None:
        spark = clock_df.sparkSession
        retrying = Retrying(
            stop=stop_after_attempt(self.batch.write_attempts),
            wait=wait_exponential_jitter(multiplier=0.5, max=30, jitter=0.5),
            retry=retry_if_exception_type(Exception),
            reraise=True,
            before_sleep=lambda state: log.warning(
                "micro-batch %d attempt %d failed, records RELEASEd, retrying: %s",
                batch_id,
                state.attempt_number,
                state.outcome.exception() if state.outcome else None,
            ),
        )
        for attempt in retrying:
            with attempt:
                self._attempt(spark, batch_id)

    def _attempt(self, spark: SparkSession, batch_id: int) -> None:
        if self._closed.is_set():
            return
        self.main.retry_own_repairs(spark)
        self.dead.retry_own_repairs(spark)
        with _timed(self.stats, "drain"):
            batches = self.buffer.drain(self.batch.max_records, self.batch.max_wait_ms / 1000)
        if not batches:
            self.stats.empty_batches += 1
            return
        drained_at = datetime.now(UTC)
        self.stats.records_in += sum(len(b) for b in batches)
        try:
            self._decide(spark, batches, batch_id)
        except BaseException:
            self.stats.failed_attempts += 1
            for b in batches:
                b.release_undecided()
            self._remember_first_seen(batches, drained_at)
            raise

    def _decide(self, spark: SparkSession, batches: list[PollBatch], batch_id: int) -> None:
        with _timed(self.stats, "plan"):
            self.main.cache.refresh()
            self.dead.cache.refresh()
            plan = self._plan(batches)
        outcome: dict[RecordKey, CommitProof] = {}
        accepted: set[RecordKey] = set()
        if plan.candidates:
            outcome, accepted = self._write(spark, plan, batch_id)
        with _timed(self.stats, "decide"):
            self._decide_all(batches, plan, outcome, accepted)
        if faults.active("after_accept"):
            for b in batches:
                b.acks_committed.wait(30)
            faults.hit("after_accept")

    def _decide_all(
        self,
        batches: list[PollBatch],
        plan: _Plan,
        outcome: dict[RecordKey, CommitProof],
        accepted: set[RecordKey],
    ) -> None:
        decisions: dict[tuple[PollBatch, CommitProof, bool], list[int]] = {}  # one command per poll and proof
        for b, i, key in (*plan.candidates, *plan.copies):
            decisions.setdefault((b, outcome[key], key in accepted), []).append(i)
        if plan.present:
            proof = self.main.proof_of_presence()
            for b, i in plan.present:
                decisions.setdefault((b, proof, True), []).append(i)
        if plan.parked:
            proof = self.dead.proof_of_presence()
            for b, i in plan.parked:
                decisions.setdefault((b, proof, False), []).append(i)
        for (b, proof, accept), indices in decisions.items():
            if accept:
                b.accept(proof, indices)
            else:
                b.reject(proof, indices)
        self._account_locks(batches)

    def _plan(self, batches: list[PollBatch]) -> _Plan:
        plan = _Plan()
        seen: set[RecordKey] = set()
        for b in batches:
            for i, r in enumerate(b.records):
                key = _record_key(r)
                if self.main.contains(*key):
                    plan.present.append((b, i))
                elif self.dead.contains(*key):
                    plan.parked.append((b, i))
                elif key in seen:
                    plan.copies.append((b, i, key))
                else:
                    seen.add(key)
                    plan.candidates.append((b, i, key))
        self.stats.dedup_hits += len(plan.present)
        self.stats.dead_letter_hits += len(plan.parked)
        self.stats.in_batch_duplicates += len(plan.copies)
        return plan

    def _write(
        self, spark: SparkSession, plan: _Plan, batch_id: int
    ) -> tuple[dict[RecordKey, CommitProof], set[RecordKey]]:
        """Classify and append the candidates; the proof each record is decided with, and the good ones."""
        records = [b.records[i] for b, i, _ in plan.candidates]
        keys = [key for _, _, key in plan.candidates]
        stamp = datetime.now(UTC)
        with _timed(self.stats, "classify"):
            table = records_to_arrow(records, batch_id, stamp)
            bad = {b.index: b for b in precheck(table, self.reader.cfg, self.max_delivery_count)}
            good_rows = self._classify(spark, table, keys, bad)
        with _timed(self.stats, "write"):
            return self._append(spark, table, keys, good_rows, bad, batch_id, stamp)

    def _append(
        self,
        spark: SparkSession,
        table: pa.Table,
        keys: list[RecordKey],
        good_rows: DataFrame,
        bad: dict[int, BadRecord],
        batch_id: int,
        stamp: datetime,
    ) -> tuple[dict[RecordKey, CommitProof], set[RecordKey]]:
        good = [k for n, k in enumerate(keys) if n not in bad]
        outcome: dict[RecordKey, CommitProof] = {}
        if good:
            proof = self.main.append(
                spark, good_rows, _offsets(good), batch_id, stamp, merge_schema=self.reader.cfg.format == "json"
            )
            outcome.update(dict.fromkeys(good, proof))
        if bad:
            order = sorted(bad)
            parked = [keys[n] for n in order]
            rows = dead_letter_rows(
                table.take(pa.array(order, pa.int64())),
                [bad[n] for n in order],
                [self._first_seen.pop(keys[n], stamp) for n in order],
                stamp,
                self.job_name,
            )
            proof = self.dead.append(spark, spark.createDataFrame(rows), _offsets(parked), batch_id, stamp)
            outcome.update(dict.fromkeys(parked, proof))
            self.stats.dead_lettered += len(parked)
            classes = Counter(b.error_class for b in bad.values())
            self.stats.error_classes.update(classes)
            log.warning("dead-lettered %d records: %s", len(parked), ", ".join(f"{c}={n}" for c, n in classes.items()))
        return outcome, set(good)

    def _classify(
        self, spark: SparkSession, table: pa.Table, keys: list[RecordKey], bad: dict[int, BadRecord]
    ) -> DataFrame:
        """Adds Spark's verdicts to `bad` (text and JSON); returns the main-table rows of the good ones."""
        rest = (
            table if not bad else table.take(pa.array([n for n in range(table.num_rows) if n not in bad], pa.int64()))
        )
        if not self.reader.needs_spark or rest.num_rows == 0:
            return spark.createDataFrame(rest)
        classified = self.reader.classify(spark.createDataFrame(rest))
        verdicts = (
            classified.where(F.col(ERROR_CLASS).isNotNull())
            .select("topic", "partition", "offset", ERROR_CLASS, ERROR_MESSAGE)
            .collect()
        )
        index = {key: n for n, key in enumerate(keys)} if verdicts else {}
        for row in verdicts:
            n = index[(row["topic"], int(row["partition"]), int(row["offset"]))]
            bad[n] = BadRecord(n, row[ERROR_CLASS], row[ERROR_MESSAGE])
        return self.reader.main_rows(classified.where(F.col(ERROR_CLASS).isNull()))

    def _remember_first_seen(self, batches: list[PollBatch], drained_at: datetime) -> None:
        """Records of a failed attempt come back later; the dead-letter row says when we first saw them."""
        for b in batches:
            for r in b.records:
                self._first_seen.setdefault(_record_key(r), drained_at)
        while len(self._first_seen) > FIRST_SEEN_MAX:
            del self._first_seen[next(iter(self._first_seen))]

    def _account_locks(self, batches: list[PollBatch]) -> None:
        now = time.monotonic()
        oldest = max(now - b.acquired_at for b in batches)
        self.stats.max_cycle_s = max(self.stats.max_cycle_s, oldest)
        self.stats.last_cycle_s = oldest
        self.stats.cycle_s_sum += oldest
        self.stats.cycles += 1
        self.stats.late_accepts += sum(len(b) for b in batches if now - b.acquired_at >= self.lock_duration_s)
        if oldest > 0.5 * self.lock_duration_s:
            log.warning(
                "a poll took %.1fs from acquisition to ACCEPT, over half the %.1fs record lock: "
                "lower batch.max_records or pump.max_poll_records",
                oldest,
                self.lock_duration_s,
            )


def _record_key(record: Message) -> RecordKey:
    return (str(record.topic()), int(record.partition() or 0), int(record.offset() or 0))


def _offsets(keys: list[RecordKey]) -> dict[PartitionKey, list[int]]:
    out: dict[PartitionKey, list[int]] = {}
    for topic, partition, offset in keys:
        out.setdefault((topic, partition), []).append(offset)
    return out
