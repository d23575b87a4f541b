"""`payload.format = "json_schema"`: JSON objects in the Confluent wire format, with a schema registry.

Called through the format seam by the Delta sink (`read` per batch, on the driver), by the job's
start-up (`start`) and, after a registry outage, by the sink's retry (`probe`).

A value is magic byte 0, a 4-byte big-endian schema id, then the JSON document as UTF-8 text (what
confluent-kafka's `JSONSerializer` and Confluent's and Apicurio's Java serializers write). Per batch,
on the driver: each value's header (`sharelake.formats.wire`, numpy over the Arrow value column;
`not_wire_format`); each schema id not seen before is fetched from the registry once for the life
of the job (`unknown_schema_id` on a 404) and its properties admitted to the table's shape
(`sharelake.formats.shape.Shape`), or not (`schema_incompatible`: not a JSON Schema of an object, a
property whose type has no single column type, or one that would change a column's type). A
registry that does not answer, or refuses us, raises `RegistryUnavailableError`: never the record's
fault, the batch is RELEASEd and retried.

**The table's shape** is the union of the writer schemas' properties, by name: a property a new
writer adds joins it as a nullable column (`mergeSchema` adds it to the table), a property a writer
lacks reads null. Every column is nullable, whatever the schema's `required` says: a record's
validity against its own schema is its producer's serializer's business (confluent-kafka's validates
before writing).

**In Spark**, inside the one write job: since JSON is read by field name, one `from_json` of the
body into the whole shape reads the records of every schema id of the batch (PERMISSIVE, with a
corrupt-record column). A body that is not JSON (or not UTF-8) is `malformed_json`; a JSON value
that is not an object, or whose field does not read as its column's type, is `schema_mismatch`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import model_validator
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

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
from sharelake.formats.schema_registry_client import WARM_UP_ID, WarmUpRegistry
from sharelake.formats.shape import Shape, ShapedFormat
from sharelake.formats.wire import NOT_WIRE_FORMAT, body_column, header, schema_id_column, schema_ids

CORRUPT = "_corrupt_record"


class JsonSchemaSettings(FormatSettings):
    format: Literal["json_schema"] = "json_schema"

    @model_validator(mode="after")
    def _needs_a_registry(self) -> JsonSchemaSettings:
        if self.registry is None:
            raise ValueError("payload.format = 'json_schema' reads the Confluent wire format: set payload.registry.url")
        return self

    def values_note(self) -> str:
        return f"json_schema, writer schemas from {self.registry_note()}"


# JSON Schema -> Spark types, by hand: pyspark has no such mapping, and what PyPI offers
# (json2spark-mapper 0.1.0, schema2pyarrow) is a single small release each: a runtime dependency
# for the thirty lines below, whose rules (nullable columns, one type per property) are ours anyway.
SIMPLE_TYPES: dict[str, DataType] = {
    "integer": LongType(),
    "number": DoubleType(),
    "string": StringType(),
    "boolean": BooleanType(),
}


def spark_type(schema: Any) -> DataType:
    """The column type of a JSON Schema (a property's); ValueError when it has no single one."""
    if schema is True or schema == {}:
        raise ValueError("any JSON value is allowed: no single column type")
    if not isinstance(schema, dict):
        raise ValueError(f"{schema!r} is not a JSON Schema")
    for construct in ("$ref", "anyOf", "oneOf", "allOf"):
        if construct in schema:
            raise ValueError(f"{construct} is not mapped to a column type")
    kind = schema.get("type")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    kinds = [k for k in (kind if isinstance(kind, list) else [kind]) if k != "null"]
    if len(kinds) != 1:
        raise ValueError(f"type {kind!r}: not one type besides null")
    (kind,) = kinds
    if kind in SIMPLE_TYPES:
        return SIMPLE_TYPES[kind]
    if kind == "array":
        return ArrayType(spark_type(schema.get("items")), containsNull=True)
    if kind == "object":
        if "properties" in schema:
            props = schema["properties"]
            return StructType([StructField(name, spark_type(p), nullable=True) for name, p in props.items()])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return MapType(StringType(), spark_type(extra), valueContainsNull=True)
        raise ValueError("an object with neither properties nor typed additionalProperties")
    raise ValueError(f"type {kind!r} is not mapped to a column type")


class _JsonSchemaRead(ColumnRead):
    """The Spark read of a batch: one `from_json` of every body into the shape (all schema ids)."""

    def __init__(self, shape: StructType):
        body = body_column("value")
        text = body.cast("string")
        valid_utf8 = F.call_function("is_valid_utf8", text)
        kept_null = F.col("value").isNull()  # only reaches Spark when payload.allow_null_value is set
        with_corrupt = StructType([*shape.fields]).add(CORRUPT, "string")
        parsed = F.col(PARSED)
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
        unreadable = parsed.isNull() | parsed[CORRUPT].isNotNull()
        parse = {PARSED: F.from_json(text, with_corrupt, options), BAD: ~kept_null & (~valid_utf8 | unreadable)}
        malformed = ~valid_utf8 | F.call_function("try_parse_json", text).isNull()
        which = F.concat(F.lit(" (schema id "), schema_id_column("value").cast("string"), F.lit("): "))
        shown = F.when(valid_utf8, F.substring(text, 1, SHOWN_CHARS)).otherwise(F.lit("(not UTF-8)"))
        error_class = (
            F.when(~F.col(BAD), F.lit(None).cast("string"))
            .when(malformed, F.lit("malformed_json"))
            .otherwise(F.lit("schema_mismatch"))
        )
        message = (
            F.when(~F.col(BAD), F.lit(None).cast("string"))
            .when(malformed, F.concat(F.lit("the body is not valid JSON"), which, shown))
            .otherwise(
                F.concat(F.lit("the body is not an object whose fields read as the table's columns"), which, shown)
            )
        )
        metadata = [F.col(c) for c in METADATA_COLUMNS if c != "value"]
        super().__init__(parse, error_class, message, [*metadata, *(parsed[n].alias(n) for n in shape.fieldNames())])


class JsonSchemaFormat(ShapedFormat):
    name = "json_schema"
    settings_model = JsonSchemaSettings
    error_classes = ("not_wire_format", "unknown_schema_id", "schema_incompatible", "malformed_json", "schema_mismatch")

    def __init__(self, settings: JsonSchemaSettings, registry: Any = None):
        super().__init__(settings, registry)
        self._admitted: dict[int, BadRecord | None] = {}  # per schema id: None (admitted) or why not
        self._last: tuple[int, _JsonSchemaRead] | None = None  # the read of the shape's size

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        assert self.shape is not None, "JsonSchemaFormat.start() first"
        framing = schema_ids(rows.column("value"))
        bad = [BadRecord(i, "not_wire_format", NOT_WIRE_FORMAT) for i in np.flatnonzero(~framing.framed).tolist()]
        for sid in np.unique(framing.ids[framing.framed & (framing.ids >= 0)]).tolist():
            verdict = self._admit(int(sid))  # RegistryUnavailableError: the batch is retried
            if verdict is not None:
                rows_of = np.flatnonzero(framing.ids == sid).tolist()
                bad += [BadRecord(i, verdict.error_class, verdict.message) for i in rows_of]
        size = len(self.shape.fields)
        if self._last is None or self._last[0] != size:  # the shape only grows: its size names it
            self._last = (size, _JsonSchemaRead(self.shape.spark_type()))
        return bad, self._last[1]

    def _admit(self, sid: int) -> BadRecord | None:
        """None when schema id `sid`'s properties fit the shape (which may grow), else why not; once per id."""
        if sid in self._admitted:
            return self._admitted[sid]
        assert self.shape is not None
        found = self.registry.writer_schema(sid)
        verdict: BadRecord | None = None
        if found is None:
            verdict = BadRecord(-1, "unknown_schema_id", f"schema id {sid} is not in the registry {self.registry.url}")
        elif found[1] == "references":
            verdict = BadRecord(-1, "schema_incompatible", f"schema id {sid} uses schema references: not resolved")
        elif found[1] != "JSON":
            kind = found[1] or "AVRO"  # the registry's API leaves the type out for Avro
            verdict = BadRecord(-1, "schema_incompatible", f"schema id {sid} is a {kind} schema, not a JSON Schema")
        else:
            problem = self._properties_problem(sid, found[0])
            verdict = None if problem is None else BadRecord(-1, "schema_incompatible", problem)
        self._admitted[sid] = verdict
        return verdict

    def _properties_problem(self, sid: int, text: str) -> str | None:
        assert self.shape is not None
        try:
            schema = json.loads(text)
        except ValueError:
            return f"schema id {sid} is not valid JSON"
        if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
            return f"schema id {sid} describes no object with properties: its records cannot be columns"
        return self.shape.admit(f"schema id {sid}", list(schema["properties"].items()), spark_type)

    def sample_values(self, count: int) -> Sequence[bytes | None]:
        """Values of the warm-up schema (`warm_up_twin`): `count - 1` that read, one that does not."""
        framing = header(WARM_UP_ID)
        return [framing + b'{"id": 1, "name": "warm-up"}'] * (count - 1) + [framing + b'{"id": ']

    def warm_up_twin(self) -> PayloadFormat:
        """A reader of one built-in schema, on no registry: it warms the `from_json` code path."""
        assert isinstance(self.settings, JsonSchemaSettings)
        twin = JsonSchemaFormat(self.settings, WarmUpRegistry(json.dumps(WARM_UP_SCHEMA), "JSON"))
        twin.shape = Shape({})
        return twin


WARM_UP_SCHEMA = {
    "type": "object",
    "title": "sharelake_warm_up",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
}
