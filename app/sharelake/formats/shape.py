"""The table's shape: the payload columns a format with writer schemas reads its records into.

`table_schema` and `field_types` give the columns earlier runs wrote (a table exists once it has a commit).
`Shape` is the union of the admitted writers' fields by name (for formats whose bodies are read by field name,
such as Protobuf); Avro keeps its own reader schema (`avro.AvroShape`), resolved by Avro's rules, on `PROMOTIONS`
and those Avro's resolution adds.

A field a new writer adds joins the shape as a nullable column (the format writes with `mergeSchema`, so Delta
adds it to the table); a field a writer lacks reads null; a narrower number reads into the table's wider column
(`PROMOTIONS`). A writer whose field would change a column's type is refused, naming the field and both types:
the table's columns are never rewritten because of one producer. So is a writer with a field named like one of
Sharelake's own columns, or starting with `_` (`clashing`).

`ShapedFormat` is the start-up such a format shares (JSON Schema and Protobuf subclass it): the registry reached,
the table's columns read into its `Shape`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import DataType, DoubleType, LongType, StructField, StructType

from sharelake.failures.errors import one_line
from sharelake.formats.base import METADATA_COLUMNS, FormatSettings, PayloadFormat
from sharelake.formats.schema_registry_client import SchemaRegistry
from sharelake.table.location import TableLocation

log = logging.getLogger(__name__)
T = TypeVar("T")

# a narrower writer type every format reads into the table's wider column (writer, table), as Spark
# names the types (`simpleString`); Avro's resolution adds its own (`avro.AVRO_PROMOTIONS`)
PROMOTIONS = frozenset({("int", "bigint"), ("float", "double")})
WIDER = {"bigint": LongType(), "double": DoubleType()}  # the table's type a promoted field reads into


def table_schema(spark: SparkSession, location: TableLocation) -> StructType | None:
    """The schema of the table from earlier runs; None for a new table.

    A table exists once it has a commit: a `_delta_log` folder alone (a job killed during the
    table's first commit leaves one) is still a new table."""
    if not DeltaTable.isDeltaTable(spark, location.path):
        return None
    return spark.read.format("delta").load(location.path).schema


def field_types(struct: StructType | None, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """The fields of `struct` but `skip`, by name, as Spark names their types; {} for None."""
    fields = [] if struct is None else struct.fields
    return {f.name: f.dataType.simpleString() for f in fields if f.name not in skip}


def clashing(names: Sequence[str]) -> list[str]:
    """The names of `names` that would collide with Sharelake's own columns (or start with `_`)."""
    return sorted(n for n in names if n.lower() in METADATA_COLUMNS or n.startswith("_"))


def clash_message(clash: list[str], writer: str) -> str:
    return (
        f"field(s) {', '.join(clash)} of {writer} collide with Sharelake's own "
        f"columns ({', '.join(METADATA_COLUMNS)}, or a leading underscore)"
    )


class Shape:
    """The table's payload columns: the union of the admitted writers' fields, by name."""

    def __init__(self, table_types: dict[str, str]):
        self.fields: dict[str, DataType] = {}
        self.table_types = dict(table_types)  # the table's columns from earlier runs (Spark type names)

    def admit(self, writer: str, fields: Sequence[tuple[str, T]], spark_type: Callable[[T], DataType]) -> str | None:
        """None when the fields of `writer` (named so in messages: "types.M (schema id 7)", "schema id 7") fit: the
        shape may grow. Else why not. Each field's type is the Spark type `spark_type` makes of it."""
        clash = clashing([name for name, _ in fields])
        if clash:
            return clash_message(clash, writer)
        added: dict[str, DataType] = {}
        for name, kind in fields:
            try:
                got = spark_type(kind)
            except Exception as e:  # noqa: BLE001 - a type Spark cannot hold
                return f"field {name} of {writer}: {one_line(e, 160)}"
            want = self.fields.get(name)
            want_name = want.simpleString() if want is not None else self.table_types.get(name)
            if want_name is not None and want_name != got.simpleString():
                if (got.simpleString(), want_name) in PROMOTIONS:
                    if want is None:  # a column of earlier runs that no writer of this run had yet
                        added[name] = WIDER[want_name]
                    continue
                return (
                    f"field {name} is {want_name} in the table, {got.simpleString()} in {writer}: "
                    "the column's type cannot change"
                )
            if want is None:
                added[name] = got
        if added:
            self.fields |= added
            log.info("writer %s adds column(s) %s", writer, ", ".join(added))
        return None

    def spark_type(self) -> StructType:
        return StructType([StructField(n, t, nullable=True) for n, t in self.fields.items()])


class ShapedFormat(PayloadFormat):
    """A format whose writer schemas a schema registry serves by id and whose columns follow them
    (`Shape`): JSON Schema and Protobuf. Its start reaches the registry (ConfigError when it does not
    answer) and reads the table's columns from earlier runs; its probe asks the registry again."""

    merge_schema = True  # a writer schema may add columns

    def __init__(self, settings: FormatSettings, registry: Any = None):
        super().__init__(settings)
        self.registry: Any = registry
        self.shape: Shape | None = None  # set by `start`

    def start(self, spark: SparkSession, location: TableLocation) -> None:
        if self.shape is not None:
            return
        if self.registry is None:
            assert self.settings.registry is not None
            self.registry = SchemaRegistry(self.settings.registry)
            self.registry.check()
        self.shape = Shape(field_types(table_schema(spark, location), METADATA_COLUMNS))

    def probe(self) -> None:
        if self.registry is not None:
            self.registry.probe()
