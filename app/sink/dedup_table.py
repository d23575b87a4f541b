"""One Delta table that Sharelake appends Kafka records to, deduplicated by (topic, partition, offset).

Used by the Delta sink (`app.sink.delta_sink`) twice: for the main table and for the dead-letter
table. It owns the table's DedupCache and makes every append a provable, repairable commit:

1. the append's `userMetadata` carries a `write_id`, the offset ranges written and the write's
   stamp (every row's `stamp_column`, to the microsecond);
2. after `save()` returns, our commit is found in the log by `write_id`: its version is the
   `CommitProof` the records are decided with (INVARIANT 1);
3. if another writer committed some of the same offsets first (a second job acquired them after
   our record locks expired), our copies are deleted again before anyone decides the records:
   one DELETE keyed on offset and our stamp, retried alone on Delta conflicts. A writer that dies
   before that leaves it to the next start (`repair_pending`).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame, SparkSession
from tenacity import Retrying, stop_after_attempt, wait_exponential_jitter

from app import faults
from app.acknowledge.lifecycle import CommitProof
from app.sink.commit_log import PartitionKey, repair_metadata_json, user_metadata_json
from app.sink.dedup_cache import DedupCache, Repair
from app.sink.offset_ranges import OffsetRanges

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
REPAIR_ATTEMPTS = 8


def micros(t: datetime) -> int:
    """Exact microseconds since the epoch (integer arithmetic: names a write's rows in a DELETE)."""
    return (t - EPOCH) // timedelta(microseconds=1)


@dataclass
class TableStats:
    commits: int = 0
    rows: int = 0
    concurrent_duplicates: int = 0  # offsets another writer committed while we wrote the same
    duplicates_repaired: int = 0  # duplicate rows deleted again (ours and, at start, dead writers')
    last_version: int = -1


class DedupTable:
    def __init__(self, table_path: str, cache: DedupCache, stamp_column: str, fault_prefix: str):
        self.table_path = table_path
        self.cache = cache
        self.stamp_column = stamp_column
        self.fault_prefix = fault_prefix  # fault points: before_<prefix>_commit, after_<prefix>_commit
        self.stats = TableStats()
        self._own_repairs: set[int] = set()  # versions of our commits whose duplicates are not deleted yet

    def contains(self, topic: str, partition: int, offset: int) -> bool:
        return self.cache.contains(topic, partition, offset)

    def proof_of_presence(self) -> CommitProof:
        """For records the cache already holds: the table version the cache has read up to."""
        return CommitProof(self.table_path, self.cache.version, already_present=True)

    def append(
        self,
        spark: SparkSession,
        rows: DataFrame,
        offsets: dict[PartitionKey, list[int]],
        batch_id: int,
        stamp: datetime,
        merge_schema: bool = False,
    ) -> CommitProof:
        """Append `rows` (every row's `stamp_column` == `stamp`) as one commit; its proof, repaired."""
        ranges = {k: OffsetRanges.of(v) for k, v in offsets.items()}
        write_id = uuid.uuid4().hex
        faults.hit(f"before_{self.fault_prefix}_commit")
        writer = rows.write.format("delta").mode("append")
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        writer.option("userMetadata", user_metadata_json(write_id, batch_id, ranges, micros(stamp))).save(
            self.table_path
        )
        version = self._find_commit(write_id)
        faults.hit(f"after_{self.fault_prefix}_commit")
        self._repair_own(spark, version)
        self.stats.commits += 1
        self.stats.rows += sum(len(v) for v in offsets.values())
        self.stats.last_version = version
        return CommitProof(table=self.table_path, version=version)

    def retry_own_repairs(self, spark: SparkSession) -> None:
        """Repairs of our own commits that failed in an earlier attempt: done before the next write."""
        for repair in self.cache.repairs():
            if repair.commit.version in self._own_repairs:
                self._repair(spark, repair)

    def repair_pending(self, spark: SparkSession) -> None:
        """At start: delete the duplicates of commits whose writer died before repairing them."""
        for repair in self.cache.repairs():
            log.warning(
                "%s version %d holds %d offsets an earlier commit already held, unrepaired (its writer "
                "stopped before deleting them): deleting them now",
                self.table_path,
                repair.commit.version,
                repair.count(),
            )
            self._repair(spark, repair)

    def _find_commit(self, write_id: str) -> int:
        """Our commit's version, read from the log (folding other writers' commits before it)."""
        ours = [c for c in self.cache.refresh() if c.write_id == write_id]
        if not ours:
            raise RuntimeError(f"Delta append returned but no commit in {self.table_path} carries write {write_id}")
        return ours[0].version

    def _repair_own(self, spark: SparkSession, version: int) -> None:
        repair = next((r for r in self.cache.repairs() if r.commit.version == version), None)
        if repair is None:
            return
        self.stats.concurrent_duplicates += repair.count()
        log.warning(
            "another writer committed %d of the offsets of our version %d of %s first (it acquired them "
            "after our record locks expired): deleting our copies",
            repair.count(),
            version,
            self.table_path,
        )
        self._own_repairs.add(version)
        self._repair(spark, repair)

    def _repair(self, spark: SparkSession, repair: Repair) -> None:
        """One DELETE of `repair.commit`'s rows at the duplicate offsets; its commit says what it repaired.

        The rows are named by offset and by the commit's stamp (one value per write, to the
        microsecond), so the earlier commit's rows for the same offsets are never touched. Running
        it again deletes nothing.
        """
        commit = repair.commit
        if commit.ingested_at_us is None:
            log.error("version %d has duplicates but no write stamp in its metadata: not repaired", commit.version)
            self.cache.repaired(commit.version)
            return
        faults.hit("before_repair")
        by_partition = " OR ".join(
            f"(`topic` = '{_sql_string(topic)}' AND `partition` = {partition} AND ("
            + " OR ".join(f"`offset` BETWEEN {s} AND {e}" for s, e in spans)
            + "))"
            for (topic, partition), spans in sorted(repair.duplicates.items())
        )
        condition = f"`{self.stamp_column}` = timestamp_micros({commit.ingested_at_us}) AND ({by_partition})"
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
        log.warning("repaired version %d of %s: deleted %d duplicate rows", commit.version, self.table_path, rows)


def _sql_string(text: str) -> str:
    """Escape for a single-quoted Spark SQL literal (backslash escapes)."""
    return text.replace("\\", "\\\\").replace("'", "\\'")
