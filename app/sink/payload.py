"""Reads record values in the configured payload format and sorts out the records that cannot land.

Called by the Delta sink (`app.sink.delta_sink`) inside foreachBatch, and by `app.preflight` to
check `payload.schema` at start. Two passes, neither a per-record Python loop:

- `precheck` (driver, Arrow compute on the batch's Arrow table): no value (`null_value`), a value
  over `payload.max_value_bytes` (`too_large`), a delivery count at the configured cap
  (`delivery_count_exceeded`). Enough for `raw`, which needs no Spark job to classify.
- `PayloadReader.classify` (Spark, for `text` and `json`): `invalid_utf8`; for JSON also
  `malformed_json` (`try_parse_json` fails), `schema_mismatch` (not an object, or a field that
  `from_json` could not read as its declared type: named in the message) and
  `missing_required_field`.

Each class is permanent: the record goes to the dead-letter table and is REJECTed. Transient
failures (a failed Delta write) never reach this module; the sink RELEASEs and retries those.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as _pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType, _parse_datatype_string

from app.config import ConfigError, PayloadConfig

# the Kafka metadata columns every main-table row carries (JSON fields must not reuse these names)
METADATA_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "key",
    "value",
    "headers",
    "kafka_timestamp",
    "delivery_count",
    "ingested_at",
    "batch_id",
)
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
_CORRUPT = "_corrupt_record"
pc: Any = _pc  # pyarrow.compute's kernels are generated at import: untyped
_SHOWN_CHARS = 200  # of a bad value, in its error message


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
    flags = zip(no_value.to_pylist(), too_large.to_pylist(), exhausted.to_pylist(), strict=True)
    for i, (null, large, spent) in enumerate(flags):  # only builds messages; the test was vectorized
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
    """Classifies records in Spark and shapes the main table's rows for one payload format."""

    def __init__(self, cfg: PayloadConfig, schema: StructType | None):
        self.cfg = cfg
        self.schema = schema

    @property
    def needs_spark(self) -> bool:
        """Whether classification needs a Spark pass (raw is fully checked by `precheck`)."""
        return self.cfg.format != "raw"

    def classify(self, df: DataFrame) -> DataFrame:
        """`df` (ROW_SCHEMA) plus ERROR_CLASS / ERROR_MESSAGE (null for a good record) and parsed data."""
        text = F.col("value").cast("string")
        valid_utf8 = F.expr("is_valid_utf8(cast(value as string))")
        if self.cfg.format == "text":
            return df.withColumns(
                {
                    ERROR_CLASS: F.when(~valid_utf8, F.lit("invalid_utf8")),
                    ERROR_MESSAGE: F.when(~valid_utf8, F.lit("the value is not valid UTF-8")),
                }
            )
        assert self.schema is not None
        with_corrupt = StructType([*self.schema.fields]).add(_CORRUPT, "string")
        variant = F.expr("try_parse_json(cast(value as string))")
        parsed = F.from_json(text, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})
        df = df.withColumns({"_variant": variant, "_parsed": parsed})
        kind = F.expr("schema_of_variant(_variant)")
        shown = F.substring(text, 1, _SHOWN_CHARS)
        mismatched = F.concat_ws(", ", *(self._mismatch(f.name, f.dataType.simpleString()) for f in self.schema.fields))
        missing = F.concat_ws(
            ", ", *(F.when(F.col("_parsed")[name].isNull(), F.lit(name)) for name in self.cfg.required_fields)
        )
        kept_null = F.col("value").isNull()  # only reaches Spark when payload.allow_null_value is set
        error_class = (
            F.when(kept_null, F.lit(None).cast("string"))
            .when(~valid_utf8, F.lit("invalid_utf8"))
            .when(F.col("_variant").isNull(), F.lit("malformed_json"))
            .when(~kind.startswith("OBJECT"), F.lit("schema_mismatch"))
            .when(F.col("_parsed")[_CORRUPT].isNotNull(), F.lit("schema_mismatch"))
            .when(missing != "", F.lit("missing_required_field"))
        )
        message = (
            F.when(kept_null, F.lit(None).cast("string"))
            .when(~valid_utf8, F.lit("the value is not valid UTF-8"))
            .when(F.col("_variant").isNull(), F.concat(F.lit("not valid JSON: "), shown))
            .when(
                ~kind.startswith("OBJECT"),
                F.concat(F.lit("the JSON value is "), kind, F.lit(", payload.schema describes an object: "), shown),
            )
            .when(
                F.col("_parsed")[_CORRUPT].isNotNull(),
                F.concat(
                    F.lit("fields not matching payload.schema: "),
                    F.when(mismatched != "", mismatched).otherwise(F.lit("(unknown)")),
                    F.lit(": "),
                    shown,
                ),
            )
            .when(missing != "", F.concat(F.lit("required fields null or absent: "), missing))
        )
        return df.withColumns({ERROR_CLASS: error_class, ERROR_MESSAGE: message})

    @staticmethod
    def _mismatch(name: str, type_name: str) -> Column:
        """`name (expected type)` when the JSON has a non-null `name` that from_json could not read."""
        if "'" in name or "]" in name:  # not expressible as a variant path: the message says "(unknown)"
            return F.lit(None).cast("string")
        present = F.call_function("try_variant_get", F.col("_variant"), F.lit(f"$['{name}']"), F.lit("variant"))
        unread = present.isNotNull() & ~F.call_function("is_variant_null", present) & F.col("_parsed")[name].isNull()
        return F.when(unread, F.lit(f"{name} (expected {type_name})"))

    def main_rows(self, classified_good: DataFrame) -> DataFrame:
        """The main table's columns for good records: metadata, then the value as the format reads it."""
        if self.cfg.format == "text":
            return classified_good.select(
                *(F.col(c).cast("string").alias(c) if c == "value" else F.col(c) for c in METADATA_COLUMNS)
            )
        assert self.schema is not None
        metadata = [c for c in METADATA_COLUMNS if c != "value"]
        return classified_good.select(*metadata, *(F.col("_parsed")[f.name].alias(f.name) for f in self.schema.fields))
