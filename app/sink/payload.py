"""Reads record values in the configured payload format and sorts out the records that cannot land.

Called by the Delta sink (`app.sink.delta_sink`) inside foreachBatch, and by `app.preflight` to
check `payload.schema` at start. No per-record Python loop:

- `precheck` (driver, Arrow compute on the batch's Arrow rows): no value (`null_value`), a value
  over `payload.max_value_bytes` (`too_large`), a delivery count at the configured cap
  (`delivery_count_exceeded`). Enough for `raw`, which needs no Spark pass to classify.
- `PayloadReader.parse` (Spark, for `text` and `json`, inside the write job itself): each value is
  parsed once (`from_json` in PERMISSIVE mode with a corrupt-record column), and a cheap `_bad`
  column says whether the record can land: invalid UTF-8, not readable as `payload.schema` (not
  JSON, not an object, a field of the wrong type) or a required field null or absent. The write
  keeps the rows where it is false and counts the others (`DataFrame.observe`).
- `PayloadReader.classify` (Spark, only for batches that had bad records): the error class and
  message of each bad record: `invalid_utf8`; for JSON `malformed_json` (`try_parse_json` fails
  too), `schema_mismatch` (not an object, or a field `from_json` could not read as its declared
  type: named in the message) and `missing_required_field`.

A JSON object with a key twice is read as `from_json` reads it (the last value wins), as Spark's
own JSON sources do.

Each class is permanent: the record goes to the dead-letter table and is REJECTed. Transient
failures (a failed Delta write) never reach this module; the sink RELEASEs and retries those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as _pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DateType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    _parse_datatype_string,
)

from app.bridge.arrow_rows import ROW_SCHEMA
from app.config import ConfigError, PayloadConfig

# the Kafka metadata columns every main-table row carries (JSON fields must not reuse these names)
METADATA_COLUMNS = tuple(ROW_SCHEMA.names)
ERROR_CLASSES = (
    "null_value",
    "too_large",
    "delivery_count_exceeded",
    "invalid_utf8",
    "malformed_json",
    "schema_mismatch",
    "missing_required_field",
)
ERROR_CLASS = "_error_class"
ERROR_MESSAGE = "_error_message"
BAD = "_bad"  # true for a record that cannot land (set by PayloadReader.parse)
PARSED = "_parsed"  # the JSON value read with payload.schema (plus the corrupt-record column)
_CORRUPT = "_corrupt_record"
pc: Any = _pc  # pyarrow.compute's kernels are generated at import: untyped
_SHOWN_CHARS = 200  # of a bad value, in its error message
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a column name usable in delta.dataSkippingStatsColumns


@dataclass(frozen=True)
class BadRecord:
    index: int  # row of the batch's Arrow table
    error_class: str
    message: str


def precheck(table: pa.Table, cfg: PayloadConfig, max_delivery_count: int) -> list[BadRecord]:
    """The rows of `table` (in `arrow_rows.ROW_SCHEMA`) that fail the driver-side checks."""
    value = table.column("value")
    no_value = pc.and_(pc.is_null(value), not cfg.allow_null_value)
    lengths = pc.binary_length(value)
    too_large = pc.fill_null(pc.greater(lengths, cfg.max_value_bytes), False)
    exhausted = pc.fill_null(pc.greater_equal(table.column("delivery_count"), max_delivery_count), False)
    any_bad = pc.or_(pc.or_(no_value, too_large), exhausted)
    bad: list[BadRecord] = []
    if not pc.any(any_bad).as_py():
        return bad
    for i in pc.indices_nonzero(any_bad).to_pylist():  # only builds messages; the test was vectorized
        null, large, spent = no_value[i].as_py(), too_large[i].as_py(), exhausted[i].as_py()
        if null:
            bad.append(BadRecord(i, "null_value", "the record has no value; set payload.allow_null_value to keep them"))
        elif large:
            bad.append(
                BadRecord(
                    i,
                    "too_large",
                    f"value of {lengths[i].as_py()} bytes is over payload.max_value_bytes = {cfg.max_value_bytes}",
                )
            )
        elif spent:
            count = table.column("delivery_count")[i].as_py()
            bad.append(
                BadRecord(
                    i,
                    "delivery_count_exceeded",
                    f"delivered {count} times without landing (dead_letter.max_delivery_count = {max_delivery_count})",
                )
            )
    return bad


def parse_schema(spark: SparkSession, cfg: PayloadConfig) -> StructType | None:
    """`payload.schema` as a StructType, checked; ConfigError (one line) when it cannot be used."""
    if cfg.format != "json":
        return None
    ddl = cfg.schema_ddl or ""
    try:
        parsed = _parse_datatype_string(ddl)
    except Exception as e:  # noqa: BLE001 - Spark's parser raises its own exception types
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"payload.schema = {ddl!r}: not a Spark DDL schema ({reason}); write it like 'id long, name string'"
        ) from None
    if not isinstance(parsed, StructType):
        raise ConfigError(f"payload.schema = {ddl!r}: describe the fields of an object, like 'id long, name string'")
    names = [f.name for f in parsed.fields]
    clash = sorted({n for n in names if n.lower() in METADATA_COLUMNS or n.startswith("_")})
    if clash:
        raise ConfigError(
            f"payload.schema = {ddl!r}: field(s) {', '.join(clash)} collide with Sharelake's own columns "
            f"({', '.join(METADATA_COLUMNS)}, or a leading underscore); rename them in the producer's JSON"
        )
    unknown = [n for n in cfg.required_fields if n not in names]
    if unknown:
        raise ConfigError(
            f"payload.required_fields names {', '.join(unknown)}, not in payload.schema; add the field(s) to "
            "the schema or drop them from required_fields"
        )
    return parsed


class PayloadReader:
    """Parses records in Spark, says which cannot land and why, and shapes the main table's rows.

    The column expressions are built once (each is a few py4j calls) and reused for every batch.
    """

    def __init__(self, cfg: PayloadConfig, schema: StructType | None):
        self.cfg = cfg
        self.schema = schema
        text = F.col("value").cast("string")
        valid_utf8 = F.expr("is_valid_utf8(cast(value as string))")
        kept_null = F.col("value").isNull()  # only reaches Spark when payload.allow_null_value is set
        self._parse: dict[str, Column] = {}
        if cfg.format == "text":
            self._parse[BAD] = ~kept_null & ~valid_utf8
            self._class = F.when(F.col(BAD), F.lit("invalid_utf8"))
            self._message = F.when(F.col(BAD), F.lit("the value is not valid UTF-8"))
        elif cfg.format == "json":
            assert schema is not None
            with_corrupt = StructType([*schema.fields]).add(_CORRUPT, "string")
            parsed = F.col(PARSED)
            missing = F.concat_ws(", ", *(F.when(parsed[name].isNull(), F.lit(name)) for name in cfg.required_fields))
            unreadable = parsed.isNull() | parsed[_CORRUPT].isNotNull()
            absent = F.lit(False)
            for name in cfg.required_fields:
                absent = absent | parsed[name].isNull()
            self._parse[PARSED] = F.from_json(
                text, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
            )
            self._parse[BAD] = ~kept_null & (~valid_utf8 | unreadable | absent)
            # the diagnosis of bad records only: the variant parse tells malformed JSON from a mismatch
            variant = F.expr("try_parse_json(cast(value as string))")
            kind = F.expr("schema_of_variant(try_parse_json(cast(value as string)))")
            shown = F.substring(text, 1, _SHOWN_CHARS)
            mismatched = F.concat_ws(", ", *(self._mismatch(f.name, f.dataType.simpleString()) for f in schema.fields))
            self._class = (
                F.when(~F.col(BAD), F.lit(None).cast("string"))
                .when(~valid_utf8, F.lit("invalid_utf8"))
                .when(variant.isNull(), F.lit("malformed_json"))
                .when(~kind.startswith("OBJECT"), F.lit("schema_mismatch"))
                .when(unreadable, F.lit("schema_mismatch"))
                .when(missing != "", F.lit("missing_required_field"))
                .otherwise(F.lit("schema_mismatch"))
            )
            self._message = (
                F.when(~F.col(BAD), F.lit(None).cast("string"))
                .when(~valid_utf8, F.lit("the value is not valid UTF-8"))
                .when(variant.isNull(), F.concat(F.lit("not valid JSON: "), shown))
                .when(
                    ~kind.startswith("OBJECT"),
                    F.concat(F.lit("the JSON value is "), kind, F.lit(", payload.schema describes an object: "), shown),
                )
                .when(
                    unreadable,
                    F.concat(
                        F.lit("fields not matching payload.schema: "),
                        F.when(mismatched != "", mismatched).otherwise(F.lit("(unknown)")),
                        F.lit(": "),
                        shown,
                    ),
                )
                .when(missing != "", F.concat(F.lit("required fields null or absent: "), missing))
                .otherwise(F.concat(F.lit("not readable as payload.schema: "), shown))
            )
        metadata = [F.col(c) for c in METADATA_COLUMNS if c != "value"]
        if cfg.format == "raw":
            self._main = [F.col(c) for c in METADATA_COLUMNS]
        elif cfg.format == "text":
            self._main = [
                F.col("value").cast("string").alias("value") if c == "value" else F.col(c) for c in METADATA_COLUMNS
            ]
        else:
            assert schema is not None
            self._main = [*metadata, *(F.col(PARSED)[f.name].alias(f.name) for f in schema.fields)]

    def stats_columns(self) -> tuple[str, ...]:
        """The main table's columns Delta keeps file statistics on (data skipping): the record's
        identity, times and counts, and the JSON fields of simple types; never the raw key, value or
        headers, whose statistics readers cannot use and writers pay for."""
        kept = tuple(c for c in METADATA_COLUMNS if c not in ("key", "value", "headers"))
        if self.schema is None:
            return kept
        simple = (NumericType, StringType, DateType, TimestampType, TimestampNTZType)
        fields = (f.name for f in self.schema.fields if isinstance(f.dataType, simple) and _PLAIN_NAME.match(f.name))
        return (*kept, *fields)

    @property
    def needs_spark(self) -> bool:
        """Whether some records can only be judged in Spark (raw is fully checked by `precheck`)."""
        return self.cfg.format != "raw"

    def parse(self, df: DataFrame) -> DataFrame:
        """`df` (ROW_SCHEMA) with the parsed value and BAD (text and json); raw: `df` as it is."""
        return df.withColumns(self._parse) if self._parse else df

    def classify(self, df: DataFrame) -> DataFrame:
        """`df` (ROW_SCHEMA) parsed, plus ERROR_CLASS / ERROR_MESSAGE (null for a good record)."""
        if not self.needs_spark:
            return df.withColumns({ERROR_CLASS: F.lit(None).cast("string"), ERROR_MESSAGE: F.lit(None).cast("string")})
        return self.parse(df).withColumns({ERROR_CLASS: self._class, ERROR_MESSAGE: self._message})

    @staticmethod
    def _mismatch(name: str, type_name: str) -> Column:
        """`name (expected type)` when the JSON has a non-null `name` that from_json could not read."""
        if "'" in name or "]" in name:  # not expressible as a variant path: the message says "(unknown)"
            return F.lit(None).cast("string")
        variant = F.expr("try_parse_json(cast(value as string))")
        present = F.call_function("try_variant_get", variant, F.lit(f"$['{name}']"), F.lit("variant"))
        unread = present.isNotNull() & ~F.call_function("is_variant_null", present) & F.col(PARSED)[name].isNull()
        return F.when(unread, F.lit(f"{name} (expected {type_name})"))

    def main_rows(self, parsed: DataFrame) -> DataFrame:
        """The main table's columns of parsed rows: metadata, then the value as the format reads it."""
        return parsed.select(*self._main)
