"""A human summary of a Sharelake Delta table and its dead-letter table: rows, offsets, duplicates.

Called by `jobs/ingest.py --summary` (the demo uses it) to show what landed.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def print_table_summary(spark: SparkSession, table_path: str, dead_letter_path: str | None = None) -> None:
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
    shown = [
        F.col(c).cast("string").alias(c) if c in ("key", "value") else F.col(c)
        for c in df.columns
        if c not in ("topic", "headers", "kafka_timestamp", "ingested_at")
    ]
    df.orderBy("partition", "offset").select(*shown).show(5, truncate=60)
    if dead_letter_path and DeltaTable.isDeltaTable(spark, dead_letter_path):
        dead = spark.read.format("delta").load(dead_letter_path)
        print(f"=== dead-letter table {dead_letter_path}: {dead.count()} records")
        (
            dead.groupBy("error_class")
            .agg(F.count("*").alias("records"), F.first("error_message").alias("example"))
            .orderBy("error_class")
            .show(truncate=90)
        )
