"""The trigger clock: a `rate-micro-batch` stream whose only job is to make Spark run foreachBatch.

Used by `app.pipeline` to start the streaming query. Its rows are never read; each micro-batch
drains the RecordBuffer instead. `rate-micro-batch` (not `rate`, which yields at most one batch a
second) lets Spark start the next batch as soon as the previous one returns.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession


def clock_stream(spark: SparkSession) -> DataFrame:
    return spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).option("numPartitions", 1).load()
