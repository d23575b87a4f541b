"""The foreachBatch function: drain the RecordBuffer, append one Delta commit, then ACCEPT.

Spark calls `DeltaSink.__call__` in the driver once per micro-batch of the clock stream (its
DataFrame is ignored). One call: take whole polls from the buffer -> one Arrow table -> one Delta
append whose `userMetadata` lists the batch's offset ranges per topic-partition -> read back the
version of that commit -> ACCEPT every record with that `CommitProof` (INVARIANT 1). If the write
fails nothing was committed, so the records are RELEASEd for redelivery and the error propagates.

No `txnAppId`/`txnVersion` keyed on the Spark batch id: after a crash Spark re-runs the last
batch id with whatever the buffer holds now, and Delta would silently skip that write.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from app.acknowledge.lifecycle import CommitProof, PollBatch
from app.bridge.arrow_rows import records_to_arrow
from app.bridge.record_buffer import RecordBuffer
from app.config import BatchConfig
from app.sink.offset_ranges import OffsetRanges

log = logging.getLogger(__name__)

METADATA_KEY = "sharelake"


@dataclass
class SinkStats:
    batches: int = 0  # micro-batches that wrote a Delta commit
    rows: int = 0
    empty_batches: int = 0
    failed_writes: int = 0
    last_version: int = -1


def batch_metadata(batches: list[PollBatch], batch_id: int, write_id: str) -> str:
    """The commit's userMetadata: which offsets this commit holds, per topic and partition."""
    offsets: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for b in batches:
        for r in b.records:
            offsets[str(r.topic())][int(r.partition() or 0)].append(int(r.offset() or 0))
    ranges = {
        topic: {str(p): OffsetRanges.of(offs).to_json() for p, offs in sorted(parts.items())}
        for topic, parts in offsets.items()
    }
    return json.dumps({METADATA_KEY: {"v": 1, "write_id": write_id, "batch_id": batch_id, "ranges": ranges}})


class DeltaSink:
    def __init__(self, buffer: RecordBuffer, table_path: str, batch: BatchConfig):
        self.buffer = buffer
        self.table_path = table_path
        self.max_records = batch.max_records
        self.max_wait_s = batch.max_wait_ms / 1000
        self.stats = SinkStats()
        self._closed = threading.Event()

    def close(self) -> None:
        """From now on micro-batches write nothing (used while the job stops)."""
        self._closed.set()

    def __call__(self, clock_df: DataFrame, batch_id: int) -> None:
        if self._closed.is_set():
            return
        batches = self.buffer.drain(self.max_records, self.max_wait_s)
        if not batches:
            self.stats.empty_batches += 1
            return
        spark = clock_df.sparkSession
        try:
            proof = self._write(spark, batches, batch_id)
        except BaseException:
            self.stats.failed_writes += 1
            for b in batches:
                b.release_undecided()
            raise
        for b in batches:
            b.accept(proof)

    def _write(self, spark: SparkSession, batches: list[PollBatch], batch_id: int) -> CommitProof:
        records = [r for b in batches for r in b.records]
        table = records_to_arrow(records, batch_id, datetime.now(UTC))
        write_id = uuid.uuid4().hex
        (
            spark.createDataFrame(table)
            .write.format("delta")
            .mode("append")
            .option("userMetadata", batch_metadata(batches, batch_id, write_id))
            .save(self.table_path)
        )
        version = self._version_of(spark, write_id)
        self.stats.batches += 1
        self.stats.rows += len(records)
        self.stats.last_version = version
        return CommitProof(table=self.table_path, version=version)

    def _version_of(self, spark: SparkSession, write_id: str) -> int:
        """The table version whose commit carries `write_id` (the write we just made)."""
        history = DeltaTable.forPath(spark, self.table_path).history(20).select("version", "userMetadata").collect()
        for row in history:
            if row.userMetadata and write_id in row.userMetadata:
                return int(row.version)
        raise RuntimeError(f"Delta append returned but no commit in {self.table_path} carries write {write_id}")
