"""The trigger clock: a `rate-micro-batch` stream whose only job is to make Spark run foreachBatch.

Its rows are never read; each micro-batch drains the RecordBuffer instead. `rate-micro-batch` (not `rate`, which
yields at most one batch a second) lets Spark start the next batch as soon as the previous one returns.

The clock runs in a SparkSession of its own (`clock_session`). Spark writes its offset log and commit log once per
micro-batch each, by default through Hadoop's FileContext, whose rename on the local file system runs `readlink`
in a forked process (no native Hadoop library in a pip pyspark). When the checkpoint is the default temporary
local one (it holds nothing but the rate source's offsets), the clock's session writes it through the FileSystem
API instead (`FILE_SYSTEM_MANAGER`), whose rename needs no `readlink`. A checkpoint path the user configured keeps
Spark's default manager.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def clock_session(spark: SparkSession, local_checkpoint: bool) -> SparkSession:
    """The clock's own session; with a local temporary checkpoint, its logs go through the FileSystem API."""
    session = spark.newSession()
    if local_checkpoint:
        session.conf.set(CHECKPOINT_MANAGER_CONF, FILE_SYSTEM_MANAGER)
    return session


def clock_stream(spark: SparkSession) -> DataFrame:
    return spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).option("numPartitions", 1).load()


class ClockQuery:
    """The clock stream's query: its session, checkpoint and name; started once, stopped once (a stop
    before any start does nothing)."""

    def __init__(self, clock: SparkSession, checkpoint: str, name: str):
        self._clock = clock
        self.checkpoint = checkpoint
        self.name = name
        self.query: StreamingQuery | None = None

    def add_listener(self, listener: StreamingQueryListener) -> Callable[[], None]:
        """`listener` on the clock's session; the call that removes it."""
        self._clock.streams.addListener(listener)
        return lambda: self._clock.streams.removeListener(listener)

    def start(self, each_batch: Callable[[DataFrame, int], None]) -> StreamingQuery:
        """The query, started: `each_batch` runs for every micro-batch of the clock."""
        self.query = (
            clock_stream(self._clock)
            .writeStream.foreachBatch(each_batch)
            .option("checkpointLocation", self.checkpoint)
            .queryName(self.name)
            .start()
        )
        return self.query

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
