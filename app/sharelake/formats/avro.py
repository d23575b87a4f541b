"""`payload.format = "avro"`: Avro records, in the Confluent wire format with a schema registry, or plain.

Through the format seam (`sharelake.formats.base`): `start` reaches the registry and reads the table's columns, `read`
gives a batch's verdicts on the driver and its Spark read, `probe` asks the registry again after an outage.

**With `[payload.registry]`** a value is laid out as magic byte 0, a 4-byte big-endian schema id,
then the Avro binary body. Per batch, on the driver (numpy over the Arrow value column, no per-record
Python): the header of each value (`not_wire_format` when shorter than 5 bytes or the magic byte is
not 0) and its schema id; each id not seen before is fetched from the registry once for the life of
the job (`unknown_schema_id` on a 404) and admitted to the table's shape, or not
(`schema_incompatible`, naming the field and both types; a schema with references is refused too). A registry
that does not answer, or refuses us (timeout, 5xx, 401/403), raises `RegistryUnavailableError`: never the
record's fault.

**The header** is read by `sharelake.formats.wire`, as for every wire format.

**The table's shape** (the reader schema, `AvroShape`) grows with the writer schemas: a field a new
writer adds joins it as a nullable column (`mergeSchema` adds it to the table), a field a writer
lacks reads null (or its default), a narrower type Avro promotes (int -> long, float or double; long -> float or
double; float -> double; string <-> bytes: `AVRO_PROMOTIONS`) reads as the table's type. A writer whose field
would need a column of the table to change type is refused. Avro's own `SchemaCompatibility` (Java, in Spark's
JVM) has the last word on every admission. With `avro_schema` set the shape is fixed: each writer must resolve
into it.

**In Spark**, inside the one write job: `from_avro(body, writer schema of the id, {avroSchema:
the shape})` per schema id of the batch, in PERMISSIVE mode. The reader schema given to Spark carries
one extra field with a default (`__sharelake_decoded`): Avro's resolution fills it for every body that
decodes, and PERMISSIVE mode leaves it null for one that does not (`avro_decode_failed`), which tells
a bad body from a record whose fields are all null. Avro's strings are UTF-8, and its decoder does not check:
a record with a string that is not (at any depth: in a record, an array, a map's keys or values) is
`invalid_utf8`, its message naming the field (`utf8_faults`). A record whose `required_fields` are null or absent
is `missing_required_field`. Avro's decoder allocates what a length declares before it reads it, so its limits
(`AVRO_LIMITS`) are set to the job's largest `payload.max_value_bytes` (in the driver's JVM; a cluster's executors
take them from `spark.executor.extraJavaOptions`): a longer declaration fails its decode instead of running the
JVM out of heap.

**Without a registry** (`avro_schema` only) a value is the plain Avro binary body of that schema.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructType

from sharelake.failures.errors import ConfigError, one_line
from sharelake.formats.base import (
    BAD,
    METADATA_COLUMNS,
    PARSED,
    BadRecord,
    BatchRead,
    ColumnRead,
    FormatSettings,
    PayloadFormat,
)
from sharelake.formats.schema_registry_client import WARM_UP_ID, SchemaRegistry, WarmUpRegistry
from sharelake.formats.shape import PROMOTIONS, clash_message, clashing, field_types, table_schema
from sharelake.formats.wire import NOT_WIRE_FORMAT, body_column, header, schema_id_column, schema_ids
from sharelake.table.location import TableLocation

log = logging.getLogger(__name__)
T = TypeVar("T")

DECODED = "__sharelake_decoded"  # the reader schema's extra field: true for every body that decodes
# Avro's promotions (writer type -> reader type), as Spark names the types (`simpleString`): the
# ones every format reads, and those Avro's resolution adds
AVRO_PROMOTIONS = PROMOTIONS | {
    ("int", "float"),
    ("int", "double"),
    ("bigint", "float"),
    ("bigint", "double"),
    ("string", "binary"),
    ("binary", "string"),
}
AVRO_OF_SPARK = {"int": "int", "bigint": "long", "float": "float", "double": "double", "string": "string"}
AVRO_OF_SPARK |= {"binary": "bytes", "boolean": "boolean"}
_NO_DEFAULT = object()
# Avro's decoder allocates what a string's or bytes' length (or a collection's item count) declares
# before it reads them, up to 2 GB by default: a few bytes of garbage declaring that much ran the
# executor out of heap, and an OutOfMemoryError kills it (in local mode the driver's JVM) on every
# retry of the batch. Nothing in a value is longer than the value, so Avro's own limits (these JVM
# properties) are lowered to the largest `payload.max_value_bytes` of the job: a longer declaration
# fails its decode (`avro_decode_failed`) instead.
AVRO_LIMITS = (
    "org.apache.avro.limits.string.maxLength",
    "org.apache.avro.limits.bytes.maxLength",
    "org.apache.avro.limits.collectionItems.maxLength",
)


class AvroSettings(FormatSettings):
    format: Literal["avro"] = "avro"
    avro_schema: str | None = Field(
        default=None,
        description="A fixed Avro record schema (JSON text, or `file:/path/to/schema.avsc`). Without a registry, "
        "values are plain Avro bodies of it; with one, it is the table's fixed shape and each writer schema must "
        "resolve into it (else `schema_incompatible`). avro needs this or `registry`.",
    )
    required_fields: list[str] = Field(
        default_factory=list,
        description="Top-level fields that must be present and non-null (else `missing_required_field`).",
    )

    @model_validator(mode="after")
    def _registry_or_schema(self) -> AvroSettings:
        if self.registry is None and not (self.avro_schema or "").strip():
            raise ValueError(
                "payload.format = 'avro' needs payload.registry.url (the Confluent wire format) or "
                "payload.avro_schema (plain Avro bodies of one schema)"
            )
        return self

    def values_note(self) -> str:
        return f"avro, writer schemas from {self.registry_note() or 'payload.avro_schema'}"


def bound_declared_lengths(spark: SparkSession, max_bytes: int) -> None:
    """Avro's length limits in the session's JVM: the largest `max_bytes` any format started with.

    The limits are read once per JVM (`SystemLimitException`, at class load), so they are set, then
    read again. This reaches the tasks of a local session (they run in the driver's JVM); a
    cluster's executors read them from `spark.executor.extraJavaOptions` (`-D<property>=<bytes>`)."""
    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    assert jvm is not None and gateway is not None
    system = jvm.java.lang.System
    for name in AVRO_LIMITS:
        current = system.getProperty(name)
        if current is None or int(current) < max_bytes:
            system.setProperty(name, str(max_bytes))
    limits = jvm.java.lang.Class.forName("org.apache.avro.SystemLimitException")
    reset = limits.getDeclaredMethod("resetLimits", gateway.new_array(jvm.java.lang.Class, 0))
    reset.setAccessible(True)  # package-private; Avro's own tests call it the same way
    reset.invoke(None, gateway.new_array(jvm.java.lang.Object, 0))


# -- the table's shape ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Admission:
    """What a writer schema id means for this job: read with `writer`, or refused (`error_class`)."""

    writer: str | None  # the writer schema JSON, when admitted
    error_class: str | None = None
    message: str | None = None


def _nullable(field: dict[str, Any]) -> dict[str, Any]:
    """`field` as a nullable one with a default, so a writer that lacks it reads null (or its default)."""
    kind = field["type"]
    default = field.get("default", _NO_DEFAULT)
    branches = list(kind) if isinstance(kind, list) else [kind]
    if default is _NO_DEFAULT or default is None:
        branches = ["null", *(b for b in branches if b != "null")]
        default = None
    elif "null" not in branches:
        branches = [*branches, "null"]  # the default matches the first branch, as Avro requires
    return {**field, "type": branches, "default": default}


def _record(record: dict[str, Any], fields: list[dict[str, Any]], name_of: dict[str, Any] | None) -> dict[str, Any]:
    """An Avro record schema of `fields`, named like `name_of` (Avro resolves records by name) or `record`."""
    named = {**record, **{k: v for k, v in (name_of or {}).items() if k in ("name", "namespace")}}
    named.setdefault("name", "sharelake_record")
    return {**named, "type": "record", "fields": fields}


class AvroShape:
    """The reader schema the batch's records are read into: the table's payload columns (or the
    fields of the `key` struct, for `sharelake.formats.keys`)."""

    def __init__(self, jvm: Any, fixed: dict[str, Any] | None, table_types: dict[str, str], of: str = "value"):
        self.jvm = jvm
        self.of = of  # "value" (fields become the table's columns) or "key" (fields of the `key` struct)
        self.fixed = fixed is not None
        self.fields: list[dict[str, Any]] = list(fixed["fields"]) if fixed is not None else []
        self.record = {k: v for k, v in (fixed or {}).items() if k != "fields"}
        self.table_types = dict(table_types)  # the table's columns from earlier runs (Spark type names)
        self._types = self._spark_types(self.schema()) if fixed is not None else {}

    def schema(self, name_of: dict[str, Any] | None = None) -> dict[str, Any]:
        return _record(self.record, self.fields, name_of)

    def reader_json(self, writer: dict[str, Any]) -> str:
        """The shape, named like `writer` (Avro resolves records by name), with the decode marker."""
        schema = self.schema(writer)
        marker = {"name": DECODED, "type": "boolean", "default": True}
        return json.dumps({**schema, "fields": [*schema["fields"], marker]})

    def admit(self, schema_id: int, writer_json: str) -> Admission:
        try:
            writer = json.loads(writer_json)
        except ValueError:
            return Admission(None, "schema_incompatible", f"writer schema id {schema_id} is not valid JSON")
        if not isinstance(writer, dict) or writer.get("type") != "record":
            kind = writer.get("type") if isinstance(writer, dict) else writer
            return Admission(
                None,
                "schema_incompatible",
                f"writer schema id {schema_id} is {kind!r}, not a record: Avro {self.of}s are read as records",
            )
        names = [f["name"] for f in writer.get("fields", [])]
        top_level = self.of == "value"  # a key's fields live inside the `key` column: no clash
        clash = clashing(names) if top_level else []
        if clash:
            return Admission(None, "schema_incompatible", clash_message(clash, f"writer schema id {schema_id}"))
        try:
            writer_types = self._spark_types(writer)
        except Exception as e:  # noqa: BLE001 - Avro or Spark refuse the schema
            return Admission(None, "schema_incompatible", f"writer schema id {schema_id}: {one_line(e, 200)}")
        fields = list(self.fields)
        known = {f["name"] for f in fields}
        for field in writer.get("fields", []):
            name, got = field["name"], writer_types[field["name"]]
            if name in known:
                want = self._types.get(name)
                if want is not None and got != want and (got, want) not in AVRO_PROMOTIONS:
                    return self._refused(schema_id, name, want, got)
                continue
            if self.fixed:
                continue  # a field the fixed shape lacks: Avro's resolution skips it
            want = self.table_types.get(name)
            if want is None or want == got:
                fields.append(_nullable(copy.deepcopy(field)))
            elif (got, want) in AVRO_PROMOTIONS and want in AVRO_OF_SPARK:
                fields.append(_nullable({**copy.deepcopy(field), "type": AVRO_OF_SPARK[want]}))
            else:
                return self._refused(schema_id, name, want, got)
        record = self.record or {k: v for k, v in writer.items() if k in ("name", "namespace")}
        reader = _record(record, fields, writer)
        problem = self._resolution_problem(reader, writer)
        if problem is not None:
            return Admission(None, "schema_incompatible", f"writer schema id {schema_id}: {problem}")
        try:
            new_types = self._spark_types(reader)
        except Exception as e:  # noqa: BLE001 - e.g. a named type defined twice
            return Admission(None, "schema_incompatible", f"writer schema id {schema_id}: {one_line(e, 200)}")
        added = [f["name"] for f in fields[len(self.fields) :]]
        self.fields, self.record, self._types = fields, dict(record), new_types
        if added:
            log.info("writer schema id %d adds column(s) %s to the table", schema_id, ", ".join(added))
        return Admission(writer_json)

    def spark_type(self) -> StructType:
        return StructType.fromJson(json.loads(self._struct_json(self.schema())))

    @staticmethod
    def _refused(schema_id: int, name: str, want: str, got: str) -> Admission:
        return Admission(
            None,
            "schema_incompatible",
            f"field {name} is {want} in the table, {got} in writer schema id {schema_id}: the column's type "
            "cannot change (Avro cannot resolve it and Delta cannot merge it)",
        )

    def _parse(self, schema: dict[str, Any]) -> Any:
        return self.jvm.org.apache.avro.Schema.Parser().parse(json.dumps(schema))

    def _struct_json(self, schema: dict[str, Any]) -> str:
        converters = self.jvm.org.apache.spark.sql.avro.SchemaConverters
        return str(converters.toSqlType(self._parse(schema)).dataType().json())

    def _spark_types(self, schema: dict[str, Any]) -> dict[str, str]:
        struct = StructType.fromJson(json.loads(self._struct_json(schema)))
        return {f.name: f.dataType.simpleString() for f in struct.fields}

    def _resolution_problem(self, reader: dict[str, Any], writer: dict[str, Any]) -> str | None:
        """Avro's own verdict on reading `writer` data with `reader`: None when it resolves."""
        try:
            result = self.jvm.org.apache.avro.SchemaCompatibility.checkReaderWriterCompatibility(
                self._parse(reader), self._parse(writer)
            )
        except Exception as e:  # noqa: BLE001 - Avro refuses one of the schemas
            return one_line(e, 200)
        if str(result.getType().toString()) == "COMPATIBLE":
            return None
        found = list(result.getResult().getIncompatibilities())
        if not found:
            return str(result.getDescription())[:200]
        first = found[0]
        return f"{first.getMessage()} at {first.getLocation()}"


# -- one batch in Spark ----------------------------------------------------------------------------------


def utf8_faults(value: Column, kind: DataType, path: str = "") -> list[tuple[str, Column]]:
    """Each string of `value` (of Spark type `kind`) as (its path, true where it is not valid UTF-8).

    Records are walked field by field (`user`, `address.street`); an array's items (`tags[]`) and a
    map's keys and values (`attrs{key}`, `attrs{value}`) are one check each, true when any is not.
    Null is never a fault. Avro's decoder copies a string's bytes as they are (`Utf8`), and so does
    Spark's (`UTF8String`), so this is the only check they meet."""
    if isinstance(kind, StringType):
        return [(path, F.coalesce(~F.call_function("is_valid_utf8", value), F.lit(False)))]
    if isinstance(kind, StructType):
        return [
            fault
            for field in kind.fields
            if field.name != DECODED
            for fault in utf8_faults(value[field.name], field.dataType, f"{path}.{field.name}" if path else field.name)
        ]
    if isinstance(kind, ArrayType):
        return _any_of(value, kind.elementType, f"{path}[]")
    if isinstance(kind, MapType):
        keys, values = F.map_keys(value), F.map_values(value)
        return [*_any_of(keys, kind.keyType, f"{path}{{key}}"), *_any_of(values, kind.valueType, f"{path}{{value}}")]
    return []


def _any_of(items: Column, kind: DataType, path: str) -> list[tuple[str, Column]]:
    """One fault for an array of `kind`: true when any item has one (none when `kind` holds no string)."""
    if not _holds_string(kind):
        return []

    def faulty(item: Column) -> Column:
        found = F.lit(False)
        for _, fault in utf8_faults(item, kind):
            found = found | fault
        return found

    return [(path, F.coalesce(F.exists(items, faulty), F.lit(False)))]


def _holds_string(kind: DataType) -> bool:
    if isinstance(kind, StringType):
        return True
    if isinstance(kind, StructType):
        return any(_holds_string(f.dataType) for f in kind.fields)
    if isinstance(kind, ArrayType):
        return _holds_string(kind.elementType)
    if isinstance(kind, MapType):
        return _holds_string(kind.keyType) or _holds_string(kind.valueType)
    return False


def utf8_verdict(parsed: Column, kind: StructType) -> tuple[Column, Column]:
    """Whether a decoded record holds a string that is not UTF-8, and the fields that do (for its message)."""
    faults = utf8_faults(parsed, kind)
    invalid = F.lit(False)
    for _, fault in faults:
        invalid = invalid | fault
    named = F.concat_ws(", ", *(F.when(fault, F.lit(path)) for path, fault in faults))
    return invalid, F.concat(F.lit("not valid UTF-8 in field "), named)


class AvroColumn:
    """The Avro of one column of a batch: `value` (this format) or `key` (`sharelake.formats.keys`).

    On the driver (`verdicts`): each value's header and schema id, each id fetched and admitted to
    the shape once; the error classes carry `prefix` (`key_` for keys). In Spark (`decoded`): one
    `from_avro` per schema id of the batch, all into the shape, with the decode marker.
    """

    def __init__(self, column: str, shape: AvroShape, registry: Any, plain: str | None, prefix: str = ""):
        self.column, self.shape, self.registry, self.plain, self.prefix = column, shape, registry, plain, prefix
        self.said = "" if column == "value" else f"the {column}: "  # before a message about a key
        self._admitted: dict[int, Admission] = {}
        # the Spark read of the last batch, kept while the batch's ids and the shape stay the same
        # (its expressions are py4j calls: rebuilding them costs every batch)
        self._last: tuple[tuple[tuple[int, ...], int], Any] | None = None

    def read_of(self, writers: dict[int, str], build: Callable[[], T]) -> T:
        """The read `build` makes for this batch's writer ids, built again only when they or the
        shape changed (the shape only grows: its size names it)."""
        key = (tuple(sorted(writers)), len(self.shape.fields))
        if self._last is None or self._last[0] != key:
            self._last = (key, build())
        read: T = self._last[1]
        return read

    def probe(self) -> None:
        """RegistryUnavailableError unless the registry (if any) answers now."""
        if self.registry is not None:
            self.registry.probe()

    def verdicts(self, rows: pa.Table) -> tuple[list[BadRecord], dict[int, str]]:
        """The records that cannot be read (driver checks) and the writer schema of each readable id.

        Raises `RegistryUnavailableError` when the registry did not answer for a new id."""
        if self.plain is not None:
            return [], {}
        framing = schema_ids(rows.column(self.column))
        framed, ids = framing.framed, framing.ids
        bad = [
            BadRecord(i, f"{self.prefix}not_wire_format", self.said + NOT_WIRE_FORMAT)
            for i in np.flatnonzero(~framed).tolist()
        ]
        present = np.unique(ids[framed & (ids >= 0)]).tolist()
        for sid in present:  # ids never seen: fetched and admitted once (the shape evolves here)
            if sid not in self._admitted:
                self._admitted[sid] = self._admit(int(sid))
        writers: dict[int, str] = {}
        for sid in present:
            verdict = self._admitted[sid]
            if verdict.writer is not None:
                writers[int(sid)] = verdict.writer
                continue
            assert verdict.error_class is not None and verdict.message is not None
            for i in np.flatnonzero(ids == sid).tolist():
                bad.append(BadRecord(i, self.prefix + verdict.error_class, self.said + verdict.message))
        return bad, writers

    def _admit(self, schema_id: int) -> Admission:
        found = self.registry.writer_schema(schema_id)  # RegistryUnavailableError: the batch is retried
        if found is None:
            return Admission(
                None, "unknown_schema_id", f"schema id {schema_id} is not in the registry {self.registry.url}"
            )
        text, kind = found
        if kind == "references":
            return Admission(
                None, "schema_incompatible", f"writer schema id {schema_id} uses schema references (not resolved yet)"
            )
        if kind not in (None, "AVRO"):
            return Admission(None, "schema_incompatible", f"schema id {schema_id} is a {kind} schema, not an Avro one")
        return self.shape.admit(schema_id, text)

    def decoded(self, writers: dict[int, str]) -> tuple[Column, Column]:
        """The column's decode into the shape (null where it fails, see DECODED) and its schema id."""
        if self.plain is not None:  # no registry: the whole value is the body
            options = {"mode": "PERMISSIVE", "avroSchema": self.shape.reader_json({})}
            return from_avro(F.col(self.column), self.plain, options), F.lit(None).cast("long")
        schema_id = schema_id_column(self.column)
        body = body_column(self.column)
        decoded: Column | None = None
        for sid, writer in sorted(writers.items()):
            options = {"mode": "PERMISSIVE", "avroSchema": self.shape.reader_json(json.loads(writer))}
            branch = from_avro(body, writer, options)
            decoded = F.when(schema_id == sid, branch) if decoded is None else decoded.when(schema_id == sid, branch)
        if decoded is None:  # no value of the batch needs decoding (nulls only)
            decoded = F.lit(None).cast(self.shape.spark_type().add(DECODED, "boolean"))
        return decoded, schema_id


class _AvroRead(ColumnRead):
    """The Spark read of one batch: one `from_avro` per schema id, all into the shape."""

    def __init__(self, values: AvroColumn, writers: dict[int, str], required: list[str]):
        shape, plain = values.shape, values.plain
        decoded, schema_id = values.decoded(writers)
        parsed = F.col(PARSED)
        kept_null = F.col("value").isNull()  # only reaches Spark when payload.allow_null_value is set
        failed = parsed[DECODED].isNull()
        invalid, not_utf8 = utf8_verdict(parsed, shape.spark_type())
        missing = F.concat_ws(", ", *(F.when(parsed[name].isNull(), F.lit(name)) for name in required))
        absent = F.lit(False)
        for name in required:
            absent = absent | parsed[name].isNull()
        fields = [f["name"] for f in shape.fields]
        parse = {PARSED: decoded, BAD: ~kept_null & (failed | invalid | absent)}
        which = (
            F.lit("payload.avro_schema")
            if plain is not None
            else F.concat(F.lit("its writer schema (id "), schema_id.cast("string"), F.lit(")"))
        )
        error_class = (
            F.when(~F.col(BAD), F.lit(None).cast("string"))
            .when(failed, F.lit("avro_decode_failed"))
            .when(invalid, F.lit("invalid_utf8"))
            .otherwise(F.lit("missing_required_field"))
        )
        message = (
            F.when(~F.col(BAD), F.lit(None).cast("string"))
            .when(failed, F.concat(F.lit("the body does not decode with "), which))
            .when(invalid, not_utf8)
            .otherwise(F.concat(F.lit("required fields null or absent: "), missing))
        )
        metadata = [F.col(c) for c in METADATA_COLUMNS if c != "value"]
        super().__init__(parse, error_class, message, [*metadata, *(parsed[name].alias(name) for name in fields)])


# -- the format ------------------------------------------------------------------------------------------


class AvroFormat(PayloadFormat):
    name = "avro"
    settings_model = AvroSettings
    error_classes = (
        "not_wire_format",
        "unknown_schema_id",
        "avro_decode_failed",
        "invalid_utf8",
        "schema_incompatible",
        "missing_required_field",
    )
    merge_schema = True  # a writer schema may add columns

    def __init__(self, settings: AvroSettings):
        super().__init__(settings)
        self.avro = settings
        self.registry: SchemaRegistry | None = None
        self._values: AvroColumn | None = None

    def start(self, spark: SparkSession, location: TableLocation) -> None:
        if self._values is not None:
            return
        jvm = spark.sparkContext._jvm
        bound_declared_lengths(spark, self.avro.max_value_bytes)
        fixed = self._fixed_schema(jvm) if self.avro.avro_schema else None
        plain = None
        if self.avro.registry is not None:
            self.registry = SchemaRegistry(self.avro.registry)
            self.registry.check()
        elif fixed is not None:
            plain = json.dumps(fixed)  # values carry no header: bodies of the fixed schema
        shape = AvroShape(jvm, fixed, field_types(table_schema(spark, location), METADATA_COLUMNS))
        self._values = AvroColumn("value", shape, self.registry, plain)

    def _fixed_schema(self, jvm: Any) -> dict[str, Any]:
        text = self.avro.avro_schema or ""
        if text.startswith("file:"):
            path = Path(text.removeprefix("file:"))
            try:
                text = path.read_text()
            except OSError as e:
                raise ConfigError(f"payload.avro_schema reads {path}, which cannot be read ({e.strerror})") from None
        try:
            schema = json.loads(text)
            jvm.org.apache.avro.Schema.Parser().parse(text)
        except Exception as e:  # noqa: BLE001 - JSON or Avro refuse it
            raise ConfigError(f"payload.avro_schema is not an Avro schema ({one_line(e, 160)}); fix it") from None
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise ConfigError('payload.avro_schema must be an Avro record schema ({"type": "record", ...})')
        names = {f["name"] for f in schema["fields"]}
        unknown = [n for n in self.avro.required_fields if n not in names]
        if unknown:
            raise ConfigError(
                f"payload.required_fields names {', '.join(unknown)}, not in payload.avro_schema; fix one of them"
            )
        return schema

    def probe(self) -> None:
        if self._values is not None:
            self._values.probe()

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        values = self._values
        assert values is not None, "AvroFormat.start() first"
        bad, writers = values.verdicts(rows)
        return bad, values.read_of(writers, lambda: _AvroRead(values, writers, self.avro.required_fields))

    def sample_values(self, count: int) -> Sequence[bytes | None]:
        """Values of the warm-up schema (`warm_up_twin`): `count - 1` that decode, one that does not."""
        body = WARM_UP_BODY
        broken = b"\x02"  # the string is missing: it fails in Spark, so the diagnosis is warmed too
        assert self._values is not None
        framing = WARM_UP_HEADER if self._values.plain is None else b""
        return [framing + body] * (count - 1) + [framing + broken]

    def warm_up_twin(self) -> PayloadFormat:
        """A reader of one built-in schema, on no registry: it warms `from_avro`'s code path."""
        assert self._values is not None
        jvm = self._values.shape.jvm
        twin = AvroFormat(self.avro)
        if self._values.plain is not None:
            twin._values = AvroColumn("value", AvroShape(jvm, WARM_UP_SCHEMA, {}), None, json.dumps(WARM_UP_SCHEMA))
        else:
            twin._values = AvroColumn("value", AvroShape(jvm, None, {}), warm_up_registry(), None)
        return twin


WARM_UP_SCHEMA = {
    "type": "record",
    "name": "sharelake_warm_up",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
WARM_UP_BODY = b"\x02\x0ewarm-up"  # long 1, string "warm-up"
WARM_UP_HEADER = header(WARM_UP_ID)


def warm_up_registry() -> WarmUpRegistry:
    """The warm-up's registry of Avro values and keys: it knows WARM_UP_SCHEMA only."""
    return WarmUpRegistry(json.dumps(WARM_UP_SCHEMA), None)
