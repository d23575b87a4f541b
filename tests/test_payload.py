"""Payload classification on real Spark: tombstones kept when `payload.allow_null_value` is set.

The end-to-end dead-letter tests (test_bad_input.py) cover each error class against the broker;
this pins the one switch they leave at its default.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.formats.base import precheck
from sharelake.formats.json import JsonFormat, JsonSettings
from sharelake.table.columns import stamped
from sharelake.table.location import TableLocation

RECORDS: Any = [
    SyntheticRecord("t", 0, offset, key=b"k%d" % offset, value=value, timestamp_ms=1_700_000_000_000)
    for offset, value in ((0, b'{"id": 1}'), (1, None))
]


def test_a_tombstone_is_dead_lettered_unless_null_values_are_allowed(spark: SparkSession) -> None:
    table = stamped(poll_rows(RECORDS), 0, datetime.now(UTC))
    strict = JsonSettings(schema="id long")
    assert [(b.index, b.error_class) for b in precheck(table, strict, 4)] == [(1, "null_value")]

    lenient = JsonSettings(schema="id long", allow_null_value=True)
    assert precheck(table, lenient, 4) == []
    fmt = JsonFormat(lenient)
    fmt.start(spark, TableLocation.at("unused"))
    found, reader = fmt.read(table)
    assert found == []
    parsed = reader.parse(spark.createDataFrame(table))
    assert [r["bad"] for r in parsed.select(reader.bad_row("offset").alias("bad")).collect()] == [None, None]
    rows = reader.main_rows(parsed).orderBy("offset").select("offset", "id").collect()
    assert [(r["offset"], r["id"]) for r in rows] == [(0, 1), (1, None)]  # the tombstone lands, fields null
