"""A human summary of a Sharelake Delta table: rows, per-partition offsets, duplicates, commits.

Called by `jobs/ingest.py --summary` (the demo uses it) to show what landed.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def print_table_summary(spark: SparkSession, table_path: str) -> None:
    df = spark.read.format("delta").load(table_path)
    total = df.count()
    distinct = df.select("topic", "partition", "offset").distinct().count()
    versions = DeltaTable.forPath(spark, table_path).history().count()
    print(f"\n=== Delta table {table_path}")
    print(f"rows: {total}   distinct (topic, partition, offset): {distinct}   duplicates: {total - distinct}")
    print(f"table versions (commits): {versions}")
    per_partition = (
        df.groupBy("topic", "partition")
        .agg(F.count("*").alias("rows"), F.min("offset").alias("min_offset"), F.max("offset").alias("max_offset"))
        .orderBy("topic", "partition")
    )
    per_partition.show(truncate=False)
    (
        df.orderBy("partition", "offset")
        .select("partition", "offset", F.col("key").cast("string").alias("key"),
                F.col("value").cast("string").alias("value"), "delivery_count", "batch_id")
        .show(5, truncate=60)
    )  # fmt: skip
