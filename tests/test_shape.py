"""The table shape of the formats with writer schemas (`sharelake.formats.shape`): no broker, no Spark."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.types import DataType, IntegerType, LongType, StringType

from sharelake.formats.shape import Shape, table_schema
from sharelake.table.location import TableLocation


def spark(kind: DataType) -> DataType:
    return kind


def test_a_narrower_field_of_an_earlier_runs_column_reads_into_the_tables_type() -> None:
    """A table from an earlier run has `n bigint`; this run's only writer sends `n` as int32: the
    field joins the shape as the table's bigint (it once stayed out, and `n` landed null)."""
    shape = Shape({"n": "bigint", "name": "string"})
    assert shape.admit("schema id 7", [("n", IntegerType()), ("name", StringType())], spark) is None
    assert shape.spark_type()["n"].dataType == LongType()
    assert shape.spark_type()["name"].dataType == StringType()


def test_a_column_type_change_is_refused() -> None:
    shape = Shape({"n": "string"})
    problem = shape.admit("schema id 7", [("n", IntegerType())], spark)
    assert problem == "field n is string in the table, int in schema id 7: the column's type cannot change"
    assert shape.fields == {}


def test_a_table_whose_first_commit_never_landed_is_a_new_table(spark: SparkSession, tmp_path: Path) -> None:
    """A job killed during a table's first commit leaves `_delta_log/` without a commit: the next
    run's formats must start on it as on a new table, not fail to read it."""
    where = TableLocation.at(tmp_path / "events")
    (tmp_path / "events" / "_delta_log").mkdir(parents=True)
    assert table_schema(spark, where) is None
    spark.range(1).write.format("delta").save(where.path)
    schema = table_schema(spark, where)
    assert schema is not None and schema.fieldNames() == ["id"]
