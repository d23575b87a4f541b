"""The foreachBatch function: drain the RecordBuffer, dedup, append one Delta commit, then ACCEPT.

Spark calls `DeltaSink.__call__` in the driver once per micro-batch of the clock stream (its
DataFrame is ignored). One attempt:

1. take whole polls from the buffer;
2. fold other writers' new commits into the DedupCache, then sort each record into: already in
   the table (ACCEPT, no write), first copy in this micro-batch (write), or a second copy of a
   record redelivered to another member inside this micro-batch (written once, ACCEPTed too);
3. one Delta append whose `userMetadata` carries a `write_id` and the offset ranges written;
4. read the commit files after the last known version to find ours by `write_id`: that version is
   the `CommitProof` every record is ACCEPTed with (INVARIANT 1);
5. if another writer committed some of the same offsets first (it acquired them after our locks
   expired), delete our copies of them (a DELETE keyed on offset and our write's `ingested_at`),
   so the table keeps exactly one row per record; then ACCEPT;
6. count records whose lock may have expired before the ACCEPT.

A crash between our commit and that repair leaves the duplicates to the next start: the dedup
cache finds every unrepaired duplicate commit in the lookback and `repair_pending` deletes them
before the job polls.

A failed attempt RELEASEs the attempt's undecided records (never ACCEPTs) and is retried with
exponential backoff (tenacity) on whatever the buffer holds then; after `batch.write_attempts`
failures in a row the error propagates and the query (and job) fails.

No `txnAppId`/`txnVersion` keyed on the Spark batch id: after a crash Spark re-runs the last
batch id with whatever the buffer holds now, and Delta would silently skip that write; the
records' own identity in the DedupCache makes the re-run safe instead.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame, SparkSession
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from app import faults
from app.acknowledge.lifecycle import CommitProof, PollBatch
from app.bridge.arrow_rows import records_to_arrow
from app.bridge.record_buffer import RecordBuffer
from app.config import BatchConfig
from app.sink.commit_log import PartitionKey, repair_metadata_json, user_metadata_json
from app.sink.dedup_cache import DedupCache, Repair
from app.sink.offset_ranges import OffsetRanges

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
REPAIR_ATTEMPTS = 8


@dataclass
class SinkStats:
    batches: int = 0  # Delta commits made
    rows: int = 0  # rows written
    dedup_hits: int = 0  # records already in the table: ACCEPTed without a write
    in_batch_duplicates: int = 0  # second copies inside one micro-batch: written once
    concurrent_duplicates: int = 0  # offsets another writer committed while we wrote the same
    duplicates_repaired: int = 0  # duplicate rows deleted again (ours and, at start, crashed writers')
    late_accepts: int = 0  # ACCEPTed after the record lock duration: the ACCEPT likely failed
    failed_attempts: int = 0
    empty_batches: int = 0
    last_version: int = -1
    max_cycle_s: float = 0.0  # longest acquire -> ACCEPT time of any poll


@dataclass
class _Plan:
    """How one attempt decides each drained record."""

    write: list[tuple[PollBatch, list[int]]] = field(default_factory=list)
    copies: list[tuple[PollBatch, list[int]]] = field(default_factory=list)
    present: list[tuple[PollBatch, list[int]]] = field(default_factory=list)
    written_offsets: dict[PartitionKey, list[int]] = field(default_factory=dict)  # of `write`


class DeltaSink:
    def __init__(
        self,
        buffer: RecordBuffer,
        table_path: str,
        batch: BatchConfig,
        cache: DedupCache,
        lock_duration_s: float,
    ):
        self.buffer = buffer
        self.table_path = table_path
        self.batch = batch
        self.cache = cache
        self.lock_duration_s = lock_duration_s
        self.stats = SinkStats()
        self._closed = threading.Event()
        self._own_repairs: set[int] = set()  # versions of our commits whose duplicates are not deleted yet

    def close(self) -> None:
        """From now on micro-batches write nothing (used while the job stops)."""
        self._closed.set()

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
        for repair in self.cache.repairs():  # a repair of our own commit that failed in an earlier attempt
            if repair.commit.version in self._own_repairs:
                self._repair(spark, repair)
        batches = self.buffer.drain(self.batch.max_records, self.batch.max_wait_ms / 1000)
        if not batches:
            self.stats.empty_batches += 1
            return
        try:
            self._decide(spark, batches, batch_id)
        except BaseException:
            self.stats.failed_attempts += 1
            for b in batches:
                b.release_undecided()
            raise

    def _decide(self, spark: SparkSession, batches: list[PollBatch], batch_id: int) -> None:
        self.cache.refresh()
        plan = self._plan(batches)
        if plan.write:
            proof = self._write(spark, plan, batch_id)
            for b, idx in (*plan.write, *plan.copies):
                b.accept(proof, idx)
        if plan.present:
            already = CommitProof(self.table_path, self.cache.version, already_present=True)
            for b, idx in plan.present:
                b.accept(already, idx)
        self._account_locks(batches)
        if faults.active("after_accept"):
            for b in batches:
                b.acks_committed.wait(30)
            faults.hit("after_accept")

    def _plan(self, batches: list[PollBatch]) -> _Plan:
        plan = _Plan()
        seen: set[tuple[str, int, int]] = set()
        for b in batches:
            write, copies, present = [], [], []
            for i, r in enumerate(b.records):
                key = (str(r.topic()), int(r.partition() or 0), int(r.offset() or 0))
                if self.cache.contains(*key):
                    present.append(i)
                elif key in seen:
                    copies.append(i)
                else:
                    seen.add(key)
                    write.append(i)
                    plan.written_offsets.setdefault(key[:2], []).append(key[2])
            for bucket, idx in ((plan.write, write), (plan.copies, copies), (plan.present, present)):
                if idx:
                    bucket.append((b, idx))
        self.stats.dedup_hits += sum(len(i) for _, i in plan.present)
        self.stats.in_batch_duplicates += sum(len(i) for _, i in plan.copies)
        return plan

    def _write(self, spark: SparkSession, plan: _Plan, batch_id: int) -> CommitProof:
        records = [b.records[i] for b, idx in plan.write for i in idx]
        ranges = {k: OffsetRanges.of(v) for k, v in plan.written_offsets.items()}
        write_id = uuid.uuid4().hex
        ingested_at = datetime.now(UTC)
        ingested_at_us = (ingested_at - EPOCH) // timedelta(microseconds=1)  # exact: names this write's rows
        table = records_to_arrow(records, batch_id, ingested_at)
        faults.hit("before_delta_commit")
        (
            spark.createDataFrame(table)
            .write.format("delta")
            .mode("append")
            .option("userMetadata", user_metadata_json(write_id, batch_id, ranges, ingested_at_us))
            .save(self.table_path)
        )
        version = self._find_commit(write_id)
        faults.hit("after_delta_commit")
        self._repair_own(spark, version)
        self.stats.batches += 1
        self.stats.rows += len(records)
        self.stats.last_version = version
        return CommitProof(table=self.table_path, version=version)

    def _find_commit(self, write_id: str) -> int:
        """Our commit's version, read from the log (folding other writers' commits before it)."""
        ours = [c for c in self.cache.refresh() if c.write_id == write_id]
        if not ours:
            raise RuntimeError(f"Delta append returned but no commit in {self.table_path} carries write {write_id}")
        return ours[0].version

    def _repair_own(self, spark: SparkSession, version: int) -> None:
        """Delete our copies of offsets another writer committed before our commit `version`."""
        repair = next((r for r in self.cache.repairs() if r.commit.version == version), None)
        if repair is None:
            return
        self.stats.concurrent_duplicates += repair.count()
        log.warning(
            "another writer committed %d of the offsets of our version %d first (it acquired them after "
            "our record locks expired): deleting our copies",
            repair.count(),
            version,
        )
        self._own_repairs.add(version)
        self._repair(spark, repair)

    def repair_pending(self, spark: SparkSession) -> None:
        """At start: delete the duplicates of commits whose writer died before repairing them."""
        for repair in self.cache.repairs():
            log.warning(
                "version %d holds %d offsets an earlier commit already held, unrepaired (its writer stopped "
                "before deleting them): deleting them now",
                repair.commit.version,
                repair.count(),
            )
            self._repair(spark, repair)

    def _repair(self, spark: SparkSession, repair: Repair) -> None:
        """One DELETE of `repair.commit`'s rows at the duplicate offsets; its commit says what it repaired.

        The rows are named by offset and by the commit's `ingested_at` (one value per write, to the
        microsecond), so the earlier commit's rows for the same offsets are never touched. Running
        it again deletes nothing.
        """
        commit = repair.commit
        if commit.ingested_at_us is None:
            log.error("version %d has duplicates but no ingested_at in its metadata: not repaired", commit.version)
            self.cache.repaired(commit.version)
            return
        faults.hit("before_repair")
        by_partition = " OR ".join(
            f"(`topic` = '{topic.replace(chr(39), chr(39) * 2)}' AND `partition` = {partition} AND ("
            + " OR ".join(f"`offset` BETWEEN {s} AND {e}" for s, e in spans)
            + "))"
            for (topic, partition), spans in sorted(repair.duplicates.items())
        )
        condition = f"`ingested_at` = timestamp_micros({commit.ingested_at_us}) AND ({by_partition})"
        path = self.table_path.replace("`", "``")
        metadata = repair_metadata_json(uuid.uuid4().hex, commit.version, repair.duplicates)
        # Delta checks a DELETE against every file appended meanwhile (Serializable isolation), so
        # the other writer's appends make it conflict: retry the DELETE alone, briefly
        for attempt in Retrying(
            stop=stop_after_attempt(REPAIR_ATTEMPTS),
            wait=wait_exponential_jitter(multiplier=0.2, max=5, jitter=0.5),
            reraise=True,
            before_sleep=lambda state: log.info(
                "repair of version %d conflicted (attempt %d), retrying", commit.version, state.attempt_number
            ),
        ):
            with attempt:
                spark.conf.set(USER_METADATA_CONF, metadata)
                try:
                    deleted = spark.sql(f"DELETE FROM delta.`{path}` WHERE {condition}").collect()
                finally:
                    spark.conf.unset(USER_METADATA_CONF)
        rows = int(deleted[0][0]) if deleted and deleted[0][0] is not None else 0
        self.stats.duplicates_repaired += rows
        self.cache.repaired(commit.version)
        self._own_repairs.discard(commit.version)
        log.warning("repaired version %d: deleted %d duplicate rows", commit.version, rows)

    def _account_locks(self, batches: list[PollBatch]) -> None:
        now = time.monotonic()
        oldest = max(now - b.acquired_at for b in batches)
        self.stats.max_cycle_s = max(self.stats.max_cycle_s, oldest)
        self.stats.late_accepts += sum(len(b) for b in batches if now - b.acquired_at >= self.lock_duration_s)
        if oldest > 0.5 * self.lock_duration_s:
            log.warning(
                "a poll took %.1fs from acquisition to ACCEPT, over half the %.1fs record lock: "
                "lower batch.max_records or pump.max_poll_records",
                oldest,
                self.lock_duration_s,
            )
