"""Data frames of one table writer's session built from Arrow tables.

A frame's rows travel inside its tasks as Arrow record batches (`createDataFrame` of an Arrow
table: one batch per task, decoded by the executor's JVM), never through a Python worker and never
as a driver-side `LocalRelation` (the writer's session turns that off: the optimizer would evaluate
the parse in the driver). A task of more than 1,000 KiB makes Spark warn of a task of very large
size; Sharelake's log configuration leaves that one warning out, since every batch of a few MiB
would print it. A task carries at most `MAX_TASK_BYTES` (and a quarter of the RPC message limit,
`spark.rpc.message.maxSize`), so a batch of large records is split over more tasks rather than
refused by the scheduler.
"""

from __future__ import annotations

import math

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

ROWS_PER_TASK = 4096  # a data frame's rows are split over at most defaultParallelism tasks of at least this many
MAX_TASK_BYTES = 16 << 20  # the Arrow bytes one task carries at most: more tasks beyond that
RPC_MAX_MIB = 128  # Spark's default spark.rpc.message.maxSize


class FrameBuilder:
    """Frames of `session` (a table writer's: its conf reads them) from Arrow tables."""

    def __init__(self, session: SparkSession):
        self._session = session
        sc = session.sparkContext
        self._parallelism = max(1, int(sc.defaultParallelism))
        rpc_mib = int(sc.getConf().get("spark.rpc.message.maxSize", str(RPC_MAX_MIB)) or RPC_MAX_MIB)
        self._task_bytes = max(1, min(MAX_TASK_BYTES, (rpc_mib << 20) // 4))

    def frame(self, rows: pa.Table) -> DataFrame:
        """`rows` as a data frame of the session, split over parallel tasks (one Arrow batch each)."""
        n = rows.num_rows
        tasks = max(1, min(self._parallelism, math.ceil(n / ROWS_PER_TASK)), math.ceil(rows.nbytes / self._task_bytes))
        per_task = max(1, math.ceil(n / tasks))
        batches = [_rebased(b) for b in rows.combine_chunks().to_batches(max_chunksize=per_task)]
        if not batches:  # Spark makes no frame of zero partitions
            batches = [pa.RecordBatch.from_pylist([], schema=rows.schema)]
        # the session's spark.sql.execution.arrow.maxRecordsPerBatch is above any batch: each one is a task
        table = pa.Table.from_batches(batches, rows.schema)
        return self._session.createDataFrame(table, from_arrow_schema(rows.schema))


def _rebased(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` (a slice of a larger batch) as arrays of its own at offset 0, through Arrow IPC: PySpark
    rebuilds a list-of-struct column with nulls from its offsets, which a slice's offset breaks."""
    rebased: pa.RecordBatch = pa.ipc.read_record_batch(batch.serialize(), batch.schema)
    return rebased
