"""A frame built from Arrow rows holds them all, split over parallel tasks (`sharelake.sink.delta.frames`).

The rows are a Kafka record's (`RECORD_SCHEMA`: headers a list of structs, some null), taken as a
slice of a larger table (as a filter or a round's part leaves them), which PySpark's own Arrow
checks could not rebuild before the builder re-based them.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from sharelake.bridge.arrow_rows import RECORD_SCHEMA, poll_rows
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.sink.delta.frames import MAX_TASK_BYTES, ROWS_PER_TASK, FrameBuilder
from sharelake.sink.delta.writer import writer_session


def records(n: int, value_bytes: int = 16) -> pa.Table:
    """`n` records as rows of RECORD_SCHEMA (`poll_rows`), every third without headers, every fifth without a value."""
    return poll_rows(
        [
            SyntheticRecord(
                "t",
                i % 3,
                i,
                key=f"k{i}".encode(),
                value=None if i % 5 == 0 else (f"{i:08d}".encode() * value_bytes)[:value_bytes],
                headers=None if i % 3 == 0 else [("h", f"{i}".encode())],
                timestamp_ms=1795910400000,
            )
            for i in range(n)
        ]
    )


@pytest.fixture(scope="module")
def builder(spark: SparkSession) -> FrameBuilder:
    return FrameBuilder(writer_session(spark, checkpoint_every=10))


def test_a_sliced_batch_with_null_headers_arrives_whole(builder: FrameBuilder, spark: SparkSession) -> None:
    table = records(3 * ROWS_PER_TASK + 7)
    rows = table.slice(5, 3 * ROWS_PER_TASK)  # at an offset: a slice, not arrays of its own
    frame = builder.frame(rows)
    got = frame.orderBy("offset").toArrow()
    assert got.column("offset").to_pylist() == rows.column("offset").to_pylist()
    assert got.column("headers").to_pylist() == rows.column("headers").to_pylist()
    assert got.column("value").to_pylist() == rows.column("value").to_pylist()
    parallelism = spark.sparkContext.defaultParallelism
    assert frame.rdd.getNumPartitions() == min(parallelism, 3)


def test_no_rows_is_an_empty_frame(builder: FrameBuilder) -> None:
    frame = builder.frame(records(0))
    assert frame.count() == 0
    assert frame.columns == RECORD_SCHEMA.names


def test_large_records_spread_over_more_tasks(builder: FrameBuilder) -> None:
    rows = records(40, value_bytes=1 << 20)  # 40 MiB of values in 40 rows
    frame = builder.frame(rows)
    assert frame.rdd.getNumPartitions() == math.ceil(rows.nbytes / MAX_TASK_BYTES)
    assert frame.count() == 40
