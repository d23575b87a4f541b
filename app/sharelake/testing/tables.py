"""Delta tables read for a test's assertions, ready for chispa.

`read_table` gives a table's rows in Kafka's order (topic, partition, offset), so
`chispa.assert_df_equality` can compare them with expected rows without `ignore_row_order`;
`without_bookkeeping` drops the columns Sharelake adds to every row (where the record came from and
when it was written), leaving the payload's own columns to compare.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from sharelake.bridge.arrow_rows import RECORD_SCHEMA
from sharelake.table.columns import WRITE_FIELDS

# the Kafka record's metadata and the write's stamps: on every row Sharelake writes
BOOKKEEPING = (*(f.name for f in RECORD_SCHEMA if f.name not in ("key", "value")), *(f.name for f in WRITE_FIELDS))
KAFKA_ORDER = ("topic", "partition", "offset")


def read_table(spark: SparkSession, path: str, *, missing_ok: bool = False) -> DataFrame:
    """The Delta table at `path`, ordered by topic, partition and offset; with `missing_ok`, a
    table never created reads as an empty frame."""
    if missing_ok and not DeltaTable.isDeltaTable(spark, path):
        return spark.createDataFrame([], StructType([]))
    return spark.read.format("delta").load(path).orderBy(*KAFKA_ORDER)


def without_bookkeeping(df: DataFrame) -> DataFrame:
    """`df` without Sharelake's columns (topic, partition, offset, headers, timestamps, batch id),
    keeping `key`, `value` (when kept) and the payload's columns."""
    return df.drop(*BOOKKEEPING)
