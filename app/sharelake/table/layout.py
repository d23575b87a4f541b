"""A main table's layout: its partition columns or its liquid clustering, and the generated columns they use.

One `TableLayout` per table, from the config (`delta.partition_by`, `delta.cluster_by`, `delta.generated_columns`,
and the same keys in a routed topic's `[topics.<name>]` section), which checks and normalises the keys. A layout
that asks for nothing (`chosen` false) leaves a table as it is.

- `create`: a table with a layout is created before its first append, with Delta's table builder
  (the append's own columns, the generated columns with their type, the partitioning or the
  clustering); its appends then compute the generated columns themselves (Delta's transactional
  write fills them in). A table without a layout is still created by its first append.
- `of_table`: the layout an existing table has (its Delta log's partition columns, clustering
  columns and generation expressions), compared at start with the configured one: a job whose config
  asks for another layout stops there (`mismatch`; expressions compare with spaces collapsed, case folded).

Partitioned tables are written with Delta's optimized write (one shuffle by the partition values
before the files are written): a batch spanning 30 days then writes one file per day, not one per
day and task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

GENERATION_EXPRESSION = "delta.generationExpression"  # a generated column's expression in its field metadata


@dataclass(frozen=True)
class TableLayout:
    """Partition columns or clustering columns (Delta allows one of the two), and generated columns."""

    partition_by: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    generated: tuple[tuple[str, str], ...] = ()  # (column, SQL expression over the table's other columns)

    @property
    def chosen(self) -> bool:
        """Whether the config asks for a layout (else the table keeps whatever it has)."""
        return bool(self.partition_by or self.cluster_by or self.generated)

    def describe(self) -> str:
        """One phrase: `partitioned by (day), day = CAST(timestamp AS DATE)`."""
        if self.partition_by:
            shape = f"partitioned by ({', '.join(self.partition_by)})"
        elif self.cluster_by:
            shape = f"clustered by ({', '.join(self.cluster_by)})"
        else:
            shape = "neither partitioned nor clustered"
        columns = "".join(f", {name} = {expr}" for name, expr in self.generated)
        return shape + columns

    def mismatch(self, table: TableLayout) -> bool:
        """Whether an existing table with `table`'s layout is not the one asked for (when one is)."""
        if not self.chosen:
            return False
        asked = {name: _normal(expr) for name, expr in self.generated}
        held = {name: _normal(expr) for name, expr in table.generated}
        return (
            self.partition_by != table.partition_by
            or self.cluster_by != table.cluster_by
            or any(held.get(name) != expr for name, expr in asked.items())
        )

    def create(self, spark: SparkSession, path: str, schema: StructType) -> None:
        """Create the table at `path` with `schema`'s columns, the generated ones and the layout
        (if nobody created it meanwhile). The session's table defaults apply, as on a first append."""
        builder: Any = DeltaTable.createIfNotExists(spark).location(path)
        for field in schema.fields:
            builder = builder.addColumn(field.name, field.dataType, nullable=field.nullable)
        empty = spark.createDataFrame([], schema)
        for name, expr in self.generated:
            data_type = empty.selectExpr(expr).schema.fields[0].dataType
            builder = builder.addColumn(name, data_type, generatedAlwaysAs=expr)
        if self.partition_by:
            builder = builder.partitionedBy(*self.partition_by)
        if self.cluster_by:
            builder = builder.clusterBy(*self.cluster_by)
        builder.execute()

    @classmethod
    def of_table(cls, spark: SparkSession, path: str) -> TableLayout:
        """The layout of the Delta table at `path`: DESCRIBE DETAIL's columns, and the generated
        columns of the schema in its log (a read of the table drops their expressions)."""
        detail = DeltaTable.forPath(spark, path).detail().select("partitionColumns", "clusteringColumns").first()
        assert detail is not None
        jvm: Any = spark.sparkContext._jvm
        none = jvm.scala.Option.empty()
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
        schema = StructType.fromJson(json.loads(delta_log.update(False, none, none).schema().json()))
        fields = [f for f in schema.fields if GENERATION_EXPRESSION in f.metadata]
        generated = tuple((f.name, str(f.metadata[GENERATION_EXPRESSION])) for f in fields)
        return cls(tuple(detail["partitionColumns"] or ()), tuple(detail["clusteringColumns"] or ()), generated)


def _normal(expr: str) -> str:
    """An expression as compared: spaces collapsed, case folded (Delta keeps the text it was given)."""
    return " ".join(expr.split()).lower()
