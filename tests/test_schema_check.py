"""Unit tests of the schema check before a checked append (`sharelake.sink.delta.writer.needs_schema_change`).

Delta's `writeFiles` makes no schema check of its own, so a frame that adds a column or changes a
type must go through a plain append's check (and evolution) first; a frame the table fits must not.
"""

from __future__ import annotations

from pyspark.sql.types import DataType, IntegerType, LongType, StringType, StructField, StructType

from sharelake.sink.delta.writer import needs_schema_change

INT, LONG, STRING = IntegerType(), LongType(), StringType()


def schema(**fields: DataType) -> StructType:
    return StructType([StructField(name, t) for name, t in fields.items()])


def test_a_frame_the_table_fits_needs_no_change() -> None:
    table = schema(id=LONG, qty=INT, region=STRING, key=schema(a=INT, b=STRING))
    assert not needs_schema_change(schema(id=LONG, qty=INT, region=STRING, key=schema(a=INT, b=STRING)), table)
    assert not needs_schema_change(schema(ID=LONG, key=schema(a=INT)), table)  # fewer columns, any case


def test_a_new_column_at_any_depth_or_another_type_needs_the_check() -> None:
    table = schema(id=LONG, qty=INT, key=schema(a=INT))
    assert needs_schema_change(schema(id=LONG, qty=INT, region=STRING), table)
    assert needs_schema_change(schema(id=LONG, key=schema(a=INT, b=STRING)), table)
    assert needs_schema_change(schema(id=LONG, qty=LONG), table)  # a widened type
    assert needs_schema_change(schema(id=LONG, key=STRING), table)
