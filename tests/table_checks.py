"""What a user checks in the Delta table: each produced record exactly once, nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from devkit.sample_data import Produced, event_record
from tests.waiting import wait_for

KEY_COLUMNS = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
    ]
)


def assert_exactly_once(
    spark: SparkSession, table: Path | str, produced: list[Produced], where: str | None = None
) -> None:
    """The table holds exactly the produced records (topic, partition, offset, key, value), each once.

    `where` keeps only some rows (e.g. one topic's, when another writer appends to the table too).
    """
    df = spark.read.format("delta").load(str(table))
    actual = (df.where(where) if where else df).select("topic", "partition", "offset", "key", "value")
    expected = spark.createDataFrame([(p.topic, p.partition, p.offset, p.key, p.value) for p in produced], KEY_COLUMNS)
    total, distinct = actual.count(), actual.select("topic", "partition", "offset").distinct().count()
    assert total == distinct, f"{total - distinct} duplicate rows"
    assert total == len(produced), f"{len(produced) - total} records missing" if total < len(produced) else "extra rows"
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


# the table columns of the sample events (`devkit.sample_data.event_record`) before any `region`
EVENT_COLUMNS = "topic string, partition int, offset long, key binary, id long, user string, amount double, kind string"


def event_rows(produced: list[Produced], region: bool) -> list[tuple[Any, ...]]:
    """The rows sample events produced keyed `k-<i>` land as (`EVENT_COLUMNS`, then `region`: null
    when their writer schema had none)."""
    out = []
    for p in produced:
        record = event_record(int(p.key.decode().removeprefix("k-")), region=region)
        out.append((p.topic, p.partition, p.offset, p.key, *record.values(), *(() if region else (None,))))
    return out


def dead_letters_by_key(spark: SparkSession, path: str) -> dict[str, Row]:
    """The dead-letter table's rows by record key; each key is there once."""
    parked = spark.read.format("delta").load(path).collect()
    by_key = {r["key"].decode(): r for r in parked}
    assert len(parked) == len(by_key)  # each once
    return by_key


def dead_letter_rows(spark: SparkSession, table: Path) -> int:
    """Rows in the dead-letter table next to `table` (0 when nothing ever created it)."""
    path = str(table.parent / f"{table.name}_dead_letter")
    return int(spark.read.format("delta").load(path).count()) if DeltaTable.isDeltaTable(spark, path) else 0


class DownstreamStream:
    """A downstream reader of a Sharelake table, as a data engineer writes one: a Delta streaming
    query with default options copying the table into another Delta table (a silver table).

    Started once the table exists; `finish()` processes what is left, stops it, and raises the
    query's error if it failed (a DELETE or an overwrite in the table's log fails it)."""

    def __init__(self, spark: SparkSession, table: Path, out: Path, timeout_s: float = 180):
        self.out = out
        log_dir = table / "_delta_log"
        wait_for(
            lambda: any(log_dir.glob("*.json")),
            timeout_s,
            f"no commit in {log_dir} within {timeout_s} s: the downstream stream has no table to read",
            interval_s=0.2,
        )
        self.query = (
            spark.readStream.format("delta")
            .load(str(table))
            .writeStream.format("delta")
            .option("checkpointLocation", str(out.parent / f"{out.name}_checkpoint"))
            .trigger(processingTime="1 second")
            .start(str(out))
        )

    def finish(self) -> None:
        try:
            if self.query.exception() is None:
                self.query.processAllAvailable()
        finally:
            error = self.query.exception()
            self.query.stop()
        assert error is None, f"the downstream stream failed: {error}"
