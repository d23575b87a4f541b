"""Record keys: `payload.key_format` = raw (bytes, the default) | text | avro.

A `KeyedFormat` wraps the value format's reader when a topic's keys are not raw, so a keyed topic's format is
still one `PayloadFormat`. The key lands in the main table's `key` column:

- `raw`: the bytes as Kafka holds them (binary);
- `text`: a UTF-8 string; a key that is not valid UTF-8 is dead-lettered as `key_invalid_utf8`;
- `avro`: Avro in the Confluent wire format, its writer schemas fetched from `[payload.registry]`
  and decoded into a struct (`key.customer_id`), which grows with the key's schemas as a value's
  columns do (`sharelake.formats.avro`). The value's error classes apply, prefixed `key_`:
  `key_not_wire_format`, `key_unknown_schema_id`, `key_decode_failed`, `key_schema_incompatible`, and
  `key_invalid_utf8` for a key holding a string that is not UTF-8 (as a text key that is not).

A null key stays null in every format. The start-up check refuses a table whose `key` column an
earlier run wrote in another format (one line naming payload.key_format and the column's type).
When a record's value and key are both bad, the value's class is the one recorded.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from sharelake.failures.errors import ConfigError
from sharelake.formats.avro import (
    DECODED,
    WARM_UP_BODY,
    WARM_UP_HEADER,
    AvroColumn,
    AvroShape,
    bound_declared_lengths,
    utf8_verdict,
    warm_up_registry,
)
from sharelake.formats.base import BAD, BadRecord, BatchRead, PayloadFormat
from sharelake.formats.schema_registry_client import SchemaRegistry, WarmUpRegistry
from sharelake.formats.shape import field_types, table_schema
from sharelake.table.location import TableLocation

KEY = "key"
KEY_PARSED = "_key_parsed"  # the key read into a struct (avro keys)
KEY_BAD = "_key_bad"  # true for a record whose key cannot land
VALUE_BAD = "_value_bad"  # true for a record whose value cannot land (the value format's BAD)
# the `key` column's type in each key format, as Spark names it (`simpleString`, a struct's prefix)
COLUMN_TYPES = {"raw": "binary", "text": "string", "avro": "struct"}


class KeyRead(ABC):
    """One batch's key, in Spark: the columns the parse adds (KEY_BAD among them), a bad key's class
    and message, and the `key` column as it lands."""

    @abstractmethod
    def parse(self) -> dict[str, Column]: ...

    @abstractmethod
    def error_class(self) -> Column: ...

    @abstractmethod
    def message(self) -> Column: ...

    @abstractmethod
    def value(self) -> Column: ...

    def lands(self) -> bool:
        """False while the key has no field to land (Avro keys, a new table, null keys only so far):
        the rows then go without a `key` column, which the first keyed batch adds."""
        return True


class KeyReader(ABC):
    """A key format: its start-up check, the driver's verdicts of a batch's keys, their Spark read."""

    format: str

    def start(self, spark: SparkSession, location: TableLocation) -> None:
        """Refuses (ConfigError) a table whose `key` column holds keys of another format, then `open`s."""
        schema = table_schema(spark, location)
        found = next((f.dataType for f in (schema.fields if schema else []) if f.name == KEY), None)
        if found is not None and not found.simpleString().startswith(COLUMN_TYPES[self.format]):
            written = next((k for k, t in COLUMN_TYPES.items() if found.simpleString().startswith(t)), "?")
            raise ConfigError(
                f"payload.key_format = {self.format!r}, but the table {location} holds keys as "
                f"{found.simpleString()} (key_format = {written!r}): keep that key_format, or write this "
                "topic to a new table"
            )
        self.open(spark, found)

    def open(self, spark: SparkSession, column: DataType | None) -> None:  # noqa: B027 - text keys keep no state
        """After the check: what the reader needs from the table's `key` column (None: no such column)."""

    def probe(self) -> None:  # noqa: B027 - text keys depend on nothing
        """After `DependencyUnavailable`: return once the registry answers again."""

    @abstractmethod
    def read(self, rows: pa.Table) -> tuple[list[BadRecord], KeyRead]: ...

    def sample_keys(self, count: int) -> Sequence[bytes | None]:
        """`count` keys for the warm-up (`sharelake.sink.batch.warm_up`), all readable."""
        return [b"k%d" % i for i in range(count)]

    def warm_up_twin(self) -> KeyReader:
        """The reader the warm-up runs on (one with state returns a fresh one)."""
        return self


class _TextKeys(KeyReader, KeyRead):
    format = "text"

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], KeyRead]:
        return [], self

    def parse(self) -> dict[str, Column]:
        return {KEY_BAD: F.col(KEY).isNotNull() & ~F.expr(f"is_valid_utf8(cast({KEY} as string))")}

    def error_class(self) -> Column:
        return F.when(F.col(KEY_BAD), F.lit("key_invalid_utf8"))

    def message(self) -> Column:
        return F.when(F.col(KEY_BAD), F.lit("the key is not valid UTF-8"))

    def value(self) -> Column:
        return F.col(KEY).cast("string")


class _AvroKeyRead(KeyRead):
    def __init__(self, keys: AvroColumn, writers: dict[int, str]):
        self._decoded, schema_id = keys.decoded(writers)
        self._fields = len(keys.shape.fields)
        self._which = F.concat(F.lit("its writer schema (id "), schema_id.cast("string"), F.lit(")"))
        self._failed = F.col(KEY_PARSED)[DECODED].isNull()
        self._invalid, self._not_utf8 = utf8_verdict(F.col(KEY_PARSED), keys.shape.spark_type())

    def parse(self) -> dict[str, Column]:
        return {KEY_PARSED: self._decoded, KEY_BAD: F.col(KEY).isNotNull() & (self._failed | self._invalid)}

    def error_class(self) -> Column:
        return F.when(
            F.col(KEY_BAD), F.when(self._failed, F.lit("key_decode_failed")).otherwise(F.lit("key_invalid_utf8"))
        )

    def message(self) -> Column:
        return F.when(
            F.col(KEY_BAD),
            F.when(self._failed, F.concat(F.lit("the key does not decode with "), self._which)).otherwise(
                F.concat(F.lit("the key: "), self._not_utf8)
            ),
        )

    def value(self) -> Column:
        return F.col(KEY_PARSED).dropFields(DECODED) if self._fields else F.col(KEY)

    def lands(self) -> bool:
        return self._fields > 0


class _AvroKeys(KeyReader):
    format = "avro"

    def __init__(self, registry: SchemaRegistry | WarmUpRegistry | None = None):
        self.registry = registry
        self._keys: AvroColumn | None = None

    def open(self, spark: SparkSession, column: DataType | None) -> None:
        if self._keys is not None:
            return
        assert isinstance(self.registry, SchemaRegistry)
        self.registry.check()
        struct = column if isinstance(column, StructType) else None
        shape = AvroShape(spark.sparkContext._jvm, None, field_types(struct), of=KEY)
        self._keys = AvroColumn(KEY, shape, self.registry, None, prefix="key_")

    def sample_keys(self, count: int) -> Sequence[bytes | None]:
        return [WARM_UP_HEADER + WARM_UP_BODY] * count

    def warm_up_twin(self) -> KeyReader:
        """Keys of the warm-up's built-in schema, on no registry: it warms the key's `from_avro`."""
        assert self._keys is not None
        twin = _AvroKeys(warm_up_registry())
        twin._keys = AvroColumn(KEY, AvroShape(self._keys.shape.jvm, None, {}, of=KEY), twin.registry, None, "key_")
        return twin

    def probe(self) -> None:
        if self._keys is not None:
            self._keys.probe()

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], KeyRead]:
        keys = self._keys
        assert keys is not None, "start() first"
        bad, writers = keys.verdicts(rows)
        return bad, keys.read_of(writers, lambda: _AvroKeyRead(keys, writers))


class KeyedRead(BatchRead):
    """The value format's read of a batch with the key's read beside it."""

    needs_spark = True

    def __init__(self, values: BatchRead, key: KeyRead):
        self.values, self.key = values, key

    def parse(self, df: DataFrame) -> DataFrame:
        # the value's own verdict is kept: its class and message are the value's read of BAD
        value_bad = F.col(BAD) if self.values.needs_spark else F.lit(False)
        parsed = self.values.parse(df).withColumns({VALUE_BAD: value_bad, **self.key.parse()})
        return parsed.withColumn(BAD, F.col(VALUE_BAD) | F.col(KEY_BAD))

    def errors(self) -> tuple[Column, Column]:
        value_class, value_message = self.values.errors()  # the value's class wins
        bad_value = F.col(VALUE_BAD)
        return (
            F.when(bad_value, value_class).otherwise(self.key.error_class()),
            F.when(bad_value, value_message).otherwise(self.key.message()),
        )

    def main_rows(self, parsed: DataFrame, carry: Sequence[str] = ()) -> DataFrame:
        rows = self.values.main_rows(parsed.withColumn(KEY, self.key.value()), carry)
        return rows if self.key.lands() else rows.drop(KEY)


class KeyedFormat(PayloadFormat):
    """A value format whose records' keys are read too (`payload.key_format` other than raw)."""

    name = "keyed"
    error_classes = (
        "key_invalid_utf8",
        "key_not_wire_format",
        "key_unknown_schema_id",
        "key_decode_failed",
        "key_schema_incompatible",
    )

    def __init__(self, values: PayloadFormat, keys: KeyReader):
        super().__init__(values.settings)
        self.values, self.keys = values, keys
        self.merge_schema = values.merge_schema or keys.format == "avro"  # a key's struct may grow

    def start(self, spark: SparkSession, location: TableLocation) -> None:
        self.values.start(spark, location)
        if self.keys.format == "avro":  # a key's declared lengths are bounded as a value's are
            bound_declared_lengths(spark, self.settings.max_value_bytes)
        self.keys.start(spark, location)

    def probe(self) -> None:
        self.values.probe()
        self.keys.probe()

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        bad_keys, key = self.keys.read(rows)  # RegistryUnavailableError: the batch is retried
        bad_values, values = self.values.read(rows)
        by_row = {b.index: b for b in bad_keys} | {b.index: b for b in bad_values}  # the value's class wins
        return list(by_row.values()), KeyedRead(values, key)

    def columns(self) -> tuple[str, ...] | None:
        return self.values.columns()

    def stats_columns(self) -> tuple[str, ...]:
        return self.values.stats_columns()

    def sample_values(self, count: int) -> Sequence[bytes | None]:
        return self.values.sample_values(count)

    def sample_keys(self, count: int) -> Sequence[bytes | None]:
        return self.keys.sample_keys(count)

    def warm_up_twin(self) -> PayloadFormat:
        return KeyedFormat(self.values.warm_up_twin(), self.keys.warm_up_twin())


def key_reader(key_format: str, registry: SchemaRegistry | None) -> KeyReader:
    """The reader of `key_format` (text or avro; avro needs the registry)."""
    if key_format == "text":
        return _TextKeys()
    if key_format == "avro":
        return _AvroKeys(registry)
    raise ValueError(f"no key reader for key_format {key_format!r}")
