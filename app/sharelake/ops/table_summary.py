"""A human summary of a job's Delta tables and its dead-letter table: rows, columns, offsets, duplicates.

What landed, for a person (`sharelake ingest --summary`): each main table (its
payload columns, so a column a new writer schema added shows; its data files, count and size, the
cost small commits leave), then the dead letters by class.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

METADATA = ("topic", "partition", "offset", "key", "headers", "kafka_timestamp", "delivery_count", "ingested_at")


def print_tables_summary(spark: SparkSession, table_paths: list[str], dead_letter_path: str | None = None) -> None:
    for path in table_paths:
        print_table_summary(spark, path)
    print_dead_letter_summary(spark, dead_letter_path)


def print_table_summary(spark: SparkSession, table_path: str) -> None:
    df = spark.read.format("delta").load(table_path)
    total = df.count()
    distinct = df.select("topic", "partition", "offset").distinct().count()
    table = DeltaTable.forPath(spark, table_path)
    versions = table.history().count()
    detail = table.detail().collect()[0]  # the current snapshot's data files
    files, size = int(detail["numFiles"]), int(detail["sizeInBytes"])
    print(f"\n=== Delta table {table_path}")
    print(f"rows: {total}   distinct (topic, partition, offset): {distinct}   duplicates: {total - distinct}")
    print(
        f"table versions (commits): {versions}   data files: {files}, {size / 2**20:.1f} MiB "
        f"(mean {size / max(1, files) / 2**10:.0f} KiB a file)"
    )
    columns = [
        f"{f.name} {f.dataType.simpleString()}" for f in df.schema.fields if f.name not in (*METADATA, "batch_id")
    ]
    print(f"payload columns: {', '.join(columns) or '(none: the value as it is)'}")
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


def print_dead_letter_summary(spark: SparkSession, dead_letter_path: str | None) -> None:
    if dead_letter_path and DeltaTable.isDeltaTable(spark, dead_letter_path):
        dead = spark.read.format("delta").load(dead_letter_path)
        print(f"=== dead-letter table {dead_letter_path}: {dead.count()} records")
        (
            dead.groupBy("topic", "error_class")
            .agg(F.count("*").alias("records"), F.first("error_message").alias("example"))
            .orderBy("topic", "error_class")
            .show(truncate=90)
        )
