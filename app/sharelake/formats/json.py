"""`payload.format = "json"`: a JSON object read into columns with `payload.schema` (Spark DDL).

Start-up check: the schema parses, describes an object, and names no Sharelake column. In Spark,
each value is parsed once (`from_json` in PERMISSIVE mode with a corrupt-record column), and a
cheap `_bad` column says whether the record can land: invalid UTF-8, not readable as the schema (not
JSON, not an object, a field of the wrong type) or a required field null or absent. Only the bad
records pay for their class and message (`errors`): `invalid_utf8`; `malformed_json` (`try_parse_json` fails too),
`schema_mismatch` (not an object, or a field `from_json` could not read as its declared type: named
in the message) and `missing_required_field`.

A JSON object with a key twice is read as `from_json` reads it (the last value wins), as Spark's own
JSON sources do. A `PayloadFormat` (`sharelake.formats.base`): `JsonFormat`, its settings and its read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, model_validator
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    FractionalType,
    IntegralType,
    MapType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    _parse_datatype_string,
)

from sharelake.failures.errors import ConfigError
from sharelake.formats.base import (
    BAD,
    METADATA_COLUMNS,
    PARSED,
    SHOWN_CHARS,
    BadRecord,
    BatchRead,
    ColumnRead,
    FormatSettings,
    PayloadFormat,
)
from sharelake.formats.debezium import EVENT_FIELDS, PAYLOAD, debezium_event
from sharelake.table.location import TableLocation

_CORRUPT = "_corrupt_record"
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a column name usable in delta.dataSkippingStatsColumns


class JsonSettings(FormatSettings):
    format: Literal["json"] = "json"
    schema_ddl: str | None = Field(
        default=None,
        alias="schema",
        description="json (required): the value's fields as a Spark DDL string, e.g. "
        '`"id long, user string, amount double"`. Field names must not reuse the metadata columns (`topic`, '
        "`partition`, `offset`, `key`, `value`, `headers`, ...).",
    )
    required_fields: list[str] = Field(
        default_factory=list,
        description="Top-level fields that must be present and non-null (else `missing_required_field`).",
    )

    @model_validator(mode="after")
    def _has_schema(self) -> JsonSettings:
        if not (self.schema_ddl or "").strip():
            raise ValueError("payload.format = 'json' needs payload.schema, e.g. schema = \"id long, name string\"")
        if self.envelope == "debezium" and self.required_fields:
            raise ValueError(
                "payload.required_fields is not read with envelope = 'debezium' (a delete has no `after`): the "
                "key columns (write.keys) are required instead; drop required_fields"
            )
        return self


def parse_schema(ddl: str, required_fields: list[str]) -> StructType:
    """`payload.schema` as a StructType, checked; ConfigError (one line) when it cannot be used."""
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
    unknown = [n for n in required_fields if n not in names]
    if unknown:
        raise ConfigError(
            f"payload.required_fields names {', '.join(unknown)}, not in payload.schema; add the field(s) to "
            "the schema or drop them from required_fields"
        )
    return parsed


@dataclass(frozen=True)
class _Checks:
    """The column expressions over a value and its parse (`PARSED`) that say whether, and why, it
    cannot land: shared by the parse's cheap `BAD` column and the bad records' diagnosis."""

    text: Column  # the value as a string
    valid_utf8: Column
    unreadable: Column  # no parse, or a corrupt record: not readable as the schema
    missing: Column  # the required fields null or absent, named ("" when none)
    variant: Column  # the diagnosis's parse: null when the value is not JSON at all
    first: Column  # the value's first character, which says what kind of JSON value it is

    @classmethod
    def of(cls, required_fields: list[str]) -> _Checks:
        text = F.col("value").cast("string")
        parsed = F.col(PARSED)
        return cls(
            text=text,
            valid_utf8=F.expr("is_valid_utf8(cast(value as string))"),
            unreadable=parsed.isNull() | parsed[_CORRUPT].isNotNull(),
            missing=F.concat_ws(", ", *(F.when(parsed[name].isNull(), F.lit(name)) for name in required_fields)),
            # the diagnosis of bad records only: the variant parse tells malformed JSON from a mismatch
            variant=F.expr("try_parse_json(cast(value as string))"),
            # the kind of a parsed value, from its first character: `schema_of_variant` recurses once per
            # nesting level, and a value nested some 900 deep (a few KB) overflowed the task thread's stack;
            # a StackOverflowError kills the executor (in local mode the driver's JVM) and failed the batch
            # on every retry, so that one record blocked the stream
            first=F.regexp_extract(text, r"^\s*(.)", 1),
        )


class _JsonRead(ColumnRead):
    """The parse and diagnosis of one schema; built once, reused for every batch."""

    def __init__(self, schema: StructType, required_fields: list[str], envelope: bool = False):
        # a Debezium event of such rows, plain or as {schema, payload}: its fields are parsed
        read_as = debezium_event(schema) if envelope else schema
        checks = _Checks.of(required_fields)
        super().__init__(
            _parse(read_as, required_fields, checks),
            _error_class(checks),
            _message(read_as, checks),
            _main_columns(schema, envelope),
        )


def _parse(schema: StructType, required_fields: list[str], checks: _Checks) -> dict[str, Column]:
    """The parse's columns: the value read as `schema` (PERMISSIVE, with a corrupt-record column),
    and whether it cannot land (`BAD`): invalid UTF-8, unreadable, or a required field null or absent."""
    kept_null = F.col("value").isNull()  # only reaches Spark when payload.allow_null_value is set
    with_corrupt = StructType([*schema.fields]).add(_CORRUPT, "string")
    parsed = F.col(PARSED)
    absent = F.lit(False)
    for name in required_fields:
        absent = absent | parsed[name].isNull()
    return {
        PARSED: F.from_json(checks.text, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}),
        BAD: ~kept_null & (~checks.valid_utf8 | checks.unreadable | absent),
    }


def _error_class(checks: _Checks) -> Column:
    """A bad record's dead-letter class (null for a good one)."""
    return (
        F.when(~F.col(BAD), F.lit(None).cast("string"))
        .when(~checks.valid_utf8, F.lit("invalid_utf8"))
        .when(checks.variant.isNull(), F.lit("malformed_json"))
        .when(checks.first != "{", F.lit("schema_mismatch"))
        .when(checks.unreadable, F.lit("schema_mismatch"))
        .when(checks.missing != "", F.lit("missing_required_field"))
        .otherwise(F.lit("schema_mismatch"))
    )


def _message(schema: StructType, checks: _Checks) -> Column:
    """A bad record's message (null for a good one): what is wrong, with the value's start."""
    first = checks.first
    kind = (
        F.when(first == "[", F.lit("an array"))
        .when(first == '"', F.lit("a string"))
        .when(first.isin("t", "f"), F.lit("a boolean"))
        .when(first == "n", F.lit("null"))
        .otherwise(F.lit("a number"))
    )
    shown = F.substring(checks.text, 1, SHOWN_CHARS)
    mismatched = F.concat_ws(", ", *(_mismatch(f.name, f.dataType.simpleString()) for f in schema.fields))
    return (
        F.when(~F.col(BAD), F.lit(None).cast("string"))
        .when(~checks.valid_utf8, F.lit("the value is not valid UTF-8"))
        .when(checks.variant.isNull(), F.concat(F.lit("not valid JSON: "), shown))
        .when(
            first != "{",
            F.concat(F.lit("the JSON value is "), kind, F.lit(", payload.schema describes an object: "), shown),
        )
        .when(
            checks.unreadable,
            F.concat(
                F.lit("fields not matching payload.schema: "),
                F.when(mismatched != "", mismatched).otherwise(F.lit("(unknown)")),
                F.lit(": "),
                shown,
            ),
        )
        .when(checks.missing != "", F.concat(F.lit("required fields null or absent: "), checks.missing))
        .otherwise(F.concat(F.lit("not readable as payload.schema: "), shown))
    )


def _main_columns(row: StructType, envelope: bool) -> list[Column]:
    """The main table's columns: the metadata's but the value, and the value's fields (a Debezium
    event's fields, from the converter's `payload` when it wrapped them)."""
    metadata = [F.col(c) for c in METADATA_COLUMNS if c != "value"]
    parsed = F.col(PARSED)
    if envelope:
        fields = [F.coalesce(parsed[PAYLOAD][n], parsed[n]).alias(n) for n in EVENT_FIELDS]
    else:
        fields = [parsed[f.name].alias(f.name) for f in row.fields]
    return [*metadata, *fields]


def _mismatch(name: str, type_name: str) -> Column:
    """`name (expected type)` when the JSON has a non-null `name` that from_json could not read."""
    if "'" in name or "]" in name:  # not expressible as a variant path: the message says "(unknown)"
        return F.lit(None).cast("string")
    variant = F.expr("try_parse_json(cast(value as string))")
    present = F.call_function("try_variant_get", variant, F.lit(f"$['{name}']"), F.lit("variant"))
    unread = present.isNotNull() & ~F.call_function("is_variant_null", present) & F.col(PARSED)[name].isNull()
    return F.when(unread, F.lit(f"{name} (expected {type_name})"))


class JsonFormat(PayloadFormat):
    name = "json"
    settings_model = JsonSettings
    error_classes = ("invalid_utf8", "malformed_json", "schema_mismatch", "missing_required_field")
    merge_schema = True  # payload.schema may gain fields between runs

    def __init__(self, settings: JsonSettings):
        super().__init__(settings)
        self.json = settings
        self.schema: StructType | None = None
        self._read: _JsonRead | None = None

    def start(self, spark: SparkSession, location: TableLocation) -> None:
        if self._read is None:
            self.schema = parse_schema(self.json.schema_ddl or "", self.json.required_fields)
            self._read = _JsonRead(self.schema, self.json.required_fields, self.json.envelope == "debezium")

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        assert self._read is not None, "JsonFormat.start() first"
        return [], self._read

    def columns(self) -> tuple[str, ...]:
        assert self.schema is not None, "JsonFormat.start() first"
        return (*(c for c in METADATA_COLUMNS if c != "value"), *self.schema.names)

    def stats_columns(self) -> tuple[str, ...]:
        """Beside the metadata's, the JSON fields of simple types."""
        simple = (NumericType, StringType, DateType, TimestampType, TimestampNTZType)
        fields = [] if self.schema is None else self.schema.fields
        typed = (f.name for f in fields if isinstance(f.dataType, simple) and _PLAIN_NAME.match(f.name))
        return (*super().stats_columns(), *typed)

    def sample_values(self, count: int) -> Sequence[bytes | None]:
        assert self.schema is not None
        good = json.dumps(_sample(self.schema)).encode()
        return [good] * (count - 1) + [b'{"warm": ']


def _sample(data_type: DataType) -> Any:
    """A JSON value that `from_json` reads as `data_type` (null where no simple one exists)."""
    if isinstance(data_type, IntegralType):
        return 1
    if isinstance(data_type, FractionalType):
        return 1.5
    if isinstance(data_type, StringType):
        return "warm-up"
    if isinstance(data_type, BooleanType):
        return True
    if isinstance(data_type, DateType):
        return "2026-01-01"
    if isinstance(data_type, TimestampType | TimestampNTZType):
        return "2026-01-01T00:00:00"
    if isinstance(data_type, ArrayType):
        return []
    if isinstance(data_type, MapType):
        return {}
    if isinstance(data_type, StructType):
        return {f.name: _sample(f.dataType) for f in data_type.fields}
    return None
