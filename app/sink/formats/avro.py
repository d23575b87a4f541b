"""`payload.format = "avro"`: Avro records, in the Confluent wire format with a schema registry, or plain.

Called through the format seam by the Delta sink (`read` per batch, on the driver), by the job's
start-up (`start`) and, after a registry outage, by the sink's retry (`probe`).

**With `[payload.registry]`** a value is laid out as magic byte 0, a 4-byte big-endian schema id,
then the Avro binary body. Per batch, on the driver (numpy over the Arrow value column, no per-record
Python): the header of each value (`not_wire_format` when shorter than 5 bytes or the magic byte is
not 0) and its schema id; each id not seen before is fetched from the registry once for the life of
the job (`unknown_schema_id` on a 404) and admitted to the table's shape, or not
(`schema_incompatible`, naming the field and both types). A registry that does not answer, or
refuses us (timeout, 5xx, 401/403), raises `RegistryUnavailableError`: never the record's fault.

**The table's shape** (the reader schema, `_Shape`) grows with the writer schemas: a field a new
writer adds joins it as a nullable column (`mergeSchema` adds it to the table), a field a writer
lacks reads null (or its default), a narrower type Avro promotes (int -> long, float -> double,
string <-> bytes) reads as the table's type. A writer whose field would need a column of the table
to change type is refused. Avro's own `SchemaCompatibility` (Java, in Spark's JVM) has the last word
on every admission. With `avro_schema` set the shape is fixed: each writer must resolve into it.

**In Spark**, inside the one write job: `from_avro(body, writer schema of the id, {avroSchema:
the shape})` per schema id of the batch, in PERMISSIVE mode. The reader schema given to Spark carries
one extra field with a default (`__sharelake_decoded`): Avro's resolution fills it for every body that
decodes, and PERMISSIVE mode leaves it null for one that does not (`avro_decode_failed`), which tells
a bad body from a record whose fields are all null.

**Without a registry** (`avro_schema` only) a value is the plain Avro binary body of that schema.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import StructType

from app.error_lines import ConfigError, one_line
from app.secrets import resolve_secret
from app.sink.formats.base import (
    BAD,
    METADATA_COLUMNS,
    PARSED,
    BadRecord,
    BatchRead,
    ColumnRead,
    DependencyUnavailable,
    FormatSettings,
    PayloadFormat,
)

log = logging.getLogger(__name__)

MAGIC = 0
HEADER_BYTES = 5  # magic byte + 4-byte big-endian schema id
DECODED = "__sharelake_decoded"  # the reader schema's extra field: true for every body that decodes
# Avro's promotions (writer type -> reader type), as Spark names the types (`simpleString`)
PROMOTIONS = {
    ("int", "bigint"),
    ("int", "float"),
    ("int", "double"),
    ("bigint", "float"),
    ("bigint", "double"),
    ("float", "double"),
    ("string", "binary"),
    ("binary", "string"),
}
AVRO_OF_SPARK = {"int": "int", "bigint": "long", "float": "float", "double": "double", "string": "string"}
AVRO_OF_SPARK |= {"binary": "bytes", "boolean": "boolean"}
_NO_DEFAULT = object()


class RegistryUnavailableError(DependencyUnavailable):
    """The schema registry did not answer, or refused us: the batch is RELEASEd and retried."""


class RegistrySettings(BaseModel):
    """`[payload.registry]`: where writer schemas are fetched by id (the Confluent REST API)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # e.g. "https://registry:8081", or Apicurio's "http://host:8080/apis/ccompat/v7"
    url: str
    basic_auth_user: str | None = None
    # the password; `env:NAME` or `file:/path` reads it at start (never put it on a command line)
    basic_auth_password: str | None = Field(default=None, repr=False)
    ca_location: str | None = None  # a CA certificate file for https
    timeout_s: float = Field(default=10.0, gt=0)  # per request

    @field_validator("url")
    @classmethod
    def _plain_url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"payload.registry.url = {v!r}: write it as http(s)://host:port[/path]")
        if parts.username or parts.password:
            raise ValueError(
                "payload.registry.url holds credentials: move them to payload.registry.basic_auth_user / "
                "basic_auth_password (env: or file:), so no log shows them"
            )
        return v.rstrip("/")

    @field_validator("basic_auth_password")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        return None if v is None else resolve_secret("payload.registry.basic_auth_password", v)

    @model_validator(mode="after")
    def _user_with_password(self) -> RegistrySettings:
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            raise ValueError("payload.registry.basic_auth_user and basic_auth_password go together: set both or none")
        return self

    def client_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 0}
        if self.basic_auth_user is not None:
            conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{self.basic_auth_password}"
        if self.ca_location:
            conf["ssl.ca.location"] = self.ca_location
        return conf


class AvroSettings(FormatSettings):
    format: Literal["avro"] = "avro"
    registry: RegistrySettings | None = None
    # an Avro record schema (JSON), or `file:/path` to one: the table's fixed shape. Without a
    # registry, values are plain Avro bodies of this schema; with one, each writer must resolve into it.
    avro_schema: str | None = None
    # top-level fields that must be present and non-null (else: missing_required_field)
    required_fields: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _registry_or_schema(self) -> AvroSettings:
        if self.registry is None and not (self.avro_schema or "").strip():
            raise ValueError(
                "payload.format = 'avro' needs payload.registry.url (the Confluent wire format) or "
                "payload.avro_schema (plain Avro bodies of one schema)"
            )
        return self


# -- the wire format ---------------------------------------------------------------------------------


def wire_headers(values: pa.Array | pa.ChunkedArray) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """Per value: whether it has a Confluent wire-format header, and its schema id (-1 if not).

    Null values count as having one (they are judged elsewhere) with id -1. Vectorized over the
    Arrow buffers: the first five bytes of each value, never a Python loop over records.
    """
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    n = len(arr)
    ids = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return np.ones(0, dtype=np.bool_), ids
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    long_enough = valid & (lengths >= HEADER_BYTES)
    at = starts[long_enough].astype(np.int64)
    magic_ok = np.zeros(n, dtype=np.bool_)
    magic_ok[long_enough] = data[at] == MAGIC
    framed = magic_ok
    at = starts[framed].astype(np.int64)
    b = [data[at + k].astype(np.int64) for k in range(1, HEADER_BYTES)]
    ids[framed] = (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
    return framed | ~valid, ids


def _schema_id_column() -> Column:
    """The schema id of a wire-format value, in Spark (bytes 2-5, big-endian)."""
    return F.conv(F.hex(F.substring(F.col("value"), 2, 4)), 16, 10).cast("long")


# -- the registry ------------------------------------------------------------------------------------


class SchemaRegistry:
    """Writer schemas by id from a Confluent-compatible registry, each fetched once per job."""

    def __init__(self, settings: RegistrySettings):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.settings = settings
        self.url = settings.url  # holds no credentials (the settings refuse them)
        self._client = SchemaRegistryClient(settings.client_conf())

    def check(self) -> None:
        """At start: the registry answers and lets us in; ConfigError (one line) if not."""
        try:
            self._client.get_subjects()
        except Exception as e:  # noqa: BLE001 - every failure means: not usable as configured
            raise ConfigError(
                f"payload.registry.url = {self.url!r}: {self._cause(e)}; check the address, "
                "payload.registry.basic_auth_user / basic_auth_password and ca_location"
            ) from None

    def writer_schema(self, schema_id: int) -> tuple[str, str | None] | None:
        """(schema JSON, its type) for `schema_id`; None if the registry has no such id (404)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                return None
            raise RegistryUnavailableError(f"schema registry {self.url}: {self._cause(e)}") from None
        except Exception as e:  # noqa: BLE001 - transport errors (refused, timeout, TLS): not the record's fault
            raise RegistryUnavailableError(f"schema registry {self.url}: {self._cause(e)}") from None
        if schema.references:
            return schema.schema_str or "", "references"
        return schema.schema_str or "", schema.schema_type

    def probe(self) -> None:
        """RegistryUnavailableError unless the registry answers now."""
        try:
            self._client.get_subjects()
        except Exception as e:  # noqa: BLE001 - any failure: still unavailable
            raise RegistryUnavailableError(f"schema registry {self.url}: {self._cause(e)}") from None

    def _cause(self, e: BaseException) -> str:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if isinstance(e, SchemaRegistryError):
            status = e.http_status_code
            if status in (401, 403):
                return f"refused us (HTTP {status}: {e.error_message})"
            return f"answered HTTP {status} ({e.error_message})"
        kind = type(e).__name__
        if "Timeout" in kind:
            return f"did not answer within payload.registry.timeout_s = {self.settings.timeout_s}s ({kind})"
        return f"unreachable ({kind}: {one_line(e, 160)})"


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


class _Shape:
    """The reader schema the batch's records are read into: the table's payload columns."""

    def __init__(self, jvm: Any, fixed: dict[str, Any] | None, table_types: dict[str, str]):
        self._jvm = jvm
        self.fixed = fixed is not None
        self.fields: list[dict[str, Any]] = list(fixed["fields"]) if fixed is not None else []
        self.record = {k: v for k, v in (fixed or {}).items() if k != "fields"}
        self.table_types = dict(table_types)  # the table's columns from earlier runs (Spark type names)
        self._types = self._spark_types(self.schema()) if fixed is not None else {}

    def schema(self, name_of: dict[str, Any] | None = None) -> dict[str, Any]:
        record = {**self.record, **{k: v for k, v in (name_of or {}).items() if k in ("name", "namespace")}}
        record.setdefault("name", "sharelake_record")
        return {**record, "type": "record", "fields": self.fields}

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
                f"writer schema id {schema_id} is {kind!r}, not a record: payload.format = 'avro' reads records",
            )
        names = [f["name"] for f in writer.get("fields", [])]
        clash = sorted(n for n in names if n.lower() in METADATA_COLUMNS or n.startswith("_"))
        if clash:
            return Admission(
                None,
                "schema_incompatible",
                f"field(s) {', '.join(clash)} of writer schema id {schema_id} collide with Sharelake's own "
                f"columns ({', '.join(METADATA_COLUMNS)}, or a leading underscore)",
            )
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
                if want is not None and got != want and (got, want) not in PROMOTIONS:
                    return self._refused(schema_id, name, want, got)
                continue
            if self.fixed:
                continue  # a field the fixed shape lacks: Avro's resolution skips it
            want = self.table_types.get(name)
            if want is None or want == got:
                fields.append(_nullable(copy.deepcopy(field)))
            elif (got, want) in PROMOTIONS and want in AVRO_OF_SPARK:
                fields.append(_nullable({**copy.deepcopy(field), "type": AVRO_OF_SPARK[want]}))
            else:
                return self._refused(schema_id, name, want, got)
        candidate = _Shape(self._jvm, None, self.table_types)
        candidate.fields, candidate.record, candidate.fixed = fields, dict(self.record), self.fixed
        if not candidate.record:
            candidate.record = {k: v for k, v in writer.items() if k in ("name", "namespace")}
        problem = self._resolution_problem(candidate.schema(writer), writer)
        if problem is not None:
            return Admission(None, "schema_incompatible", f"writer schema id {schema_id}: {problem}")
        try:
            new_types = self._spark_types(candidate.schema(writer))
        except Exception as e:  # noqa: BLE001 - e.g. a named type defined twice
            return Admission(None, "schema_incompatible", f"writer schema id {schema_id}: {one_line(e, 200)}")
        added = [f["name"] for f in fields[len(self.fields) :]]
        self.fields, self.record, self._types = fields, candidate.record, new_types
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
        return self._jvm.org.apache.avro.Schema.Parser().parse(json.dumps(schema))

    def _struct_json(self, schema: dict[str, Any]) -> str:
        converters = self._jvm.org.apache.spark.sql.avro.SchemaConverters
        return str(converters.toSqlType(self._parse(schema)).dataType().json())

    def _spark_types(self, schema: dict[str, Any]) -> dict[str, str]:
        struct = StructType.fromJson(json.loads(self._struct_json(schema)))
        return {f.name: f.dataType.simpleString() for f in struct.fields}

    def _resolution_problem(self, reader: dict[str, Any], writer: dict[str, Any]) -> str | None:
        """Avro's own verdict on reading `writer` data with `reader`: None when it resolves."""
        try:
            result = self._jvm.org.apache.avro.SchemaCompatibility.checkReaderWriterCompatibility(
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


class _AvroRead(ColumnRead):
    """The Spark read of one batch: one `from_avro` per schema id, all into the shape."""

    def __init__(self, shape: _Shape, writers: dict[int, str], plain: str | None, required: list[str]):
        if plain is not None:  # no registry: the whole value is the body
            options = {"mode": "PERMISSIVE", "avroSchema": shape.reader_json({})}
            decoded: Column | None = from_avro(F.col("value"), plain, options)
            schema_id: Column = F.lit(None).cast("long")
        else:
            schema_id = _schema_id_column()
            body = F.expr("substring(value, 6)")
            decoded = None
            for sid, writer in sorted(writers.items()):
                options = {"mode": "PERMISSIVE", "avroSchema": shape.reader_json(json.loads(writer))}
                branch = from_avro(body, writer, options)
                decoded = (
                    F.when(schema_id == sid, branch) if decoded is None else decoded.when(schema_id == sid, branch)
                )
        if decoded is None:  # no value of the batch needs decoding (kept tombstones only)
            decoded = F.lit(None).cast(shape.spark_type().add(DECODED, "boolean"))
        parsed = F.col(PARSED)
        kept_null = F.col("value").isNull()  # only reaches Spark when payload.allow_null_value is set
        failed = parsed[DECODED].isNull()
        missing = F.concat_ws(", ", *(F.when(parsed[name].isNull(), F.lit(name)) for name in required))
        absent = F.lit(False)
        for name in required:
            absent = absent | parsed[name].isNull()
        fields = [f["name"] for f in shape.fields]
        parse = {PARSED: decoded, BAD: ~kept_null & (failed | absent)}
        which = (
            F.lit("payload.avro_schema")
            if plain is not None
            else F.concat(F.lit("its writer schema (id "), schema_id.cast("string"), F.lit(")"))
        )
        error_class = (
            F.when(~F.col(BAD), F.lit(None).cast("string"))
            .when(failed, F.lit("avro_decode_failed"))
            .otherwise(F.lit("missing_required_field"))
        )
        message = (
            F.when(~F.col(BAD), F.lit(None).cast("string"))
            .when(failed, F.concat(F.lit("the body does not decode with "), which))
            .otherwise(F.concat(F.lit("required fields null or absent: "), missing))
        )
        metadata = [F.col(c) for c in METADATA_COLUMNS if c != "value"]
        super().__init__(parse, error_class, message, [*metadata, *(parsed[name].alias(name) for name in fields)])


# -- the format ------------------------------------------------------------------------------------------


class AvroFormat(PayloadFormat):
    name = "avro"
    error_classes = (
        "not_wire_format",
        "unknown_schema_id",
        "avro_decode_failed",
        "schema_incompatible",
        "missing_required_field",
    )
    merge_schema = True  # a writer schema may add columns

    def __init__(self, settings: AvroSettings):
        super().__init__(settings)
        self.avro = settings
        self.registry: SchemaRegistry | None = None
        self._shape: _Shape | None = None
        self._admitted: dict[int, Admission] = {}
        self._plain: str | None = None  # the fixed schema's JSON, when values carry no header
        # the Spark read of the last batch, kept while the batch's ids and the shape stay the same
        # (its expressions are py4j calls: rebuilding them costs every batch)
        self._last_read: tuple[tuple[tuple[int, ...], int], _AvroRead] | None = None

    def start(self, spark: SparkSession, table_path: str) -> None:
        if self._shape is not None:
            return
        jvm = spark.sparkContext._jvm
        fixed = self._fixed_schema(jvm) if self.avro.avro_schema else None
        if self.avro.registry is not None:
            self.registry = SchemaRegistry(self.avro.registry)
            self.registry.check()
        elif fixed is not None:
            self._plain = json.dumps(fixed)
        self._shape = _Shape(jvm, fixed, _table_types(spark, table_path))

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
        if self.registry is not None:
            self.registry.probe()

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        shape = self._shape
        assert shape is not None, "AvroFormat.start() first"
        if self._plain is not None:
            return [], self._spark_read(shape, {})
        assert self.registry is not None
        framed, ids = wire_headers(rows.column("value"))
        bad: list[BadRecord] = []
        for i in np.flatnonzero(~framed).tolist():
            bad.append(
                BadRecord(
                    i, "not_wire_format", "not in the Confluent wire format (shorter than 5 bytes, or magic byte not 0)"
                )
            )
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
                bad.append(BadRecord(i, verdict.error_class, verdict.message))
        return bad, self._spark_read(shape, writers)

    def _spark_read(self, shape: _Shape, writers: dict[int, str]) -> _AvroRead:
        key = (tuple(sorted(writers)), len(shape.fields))  # the shape only grows: its size names it
        if self._last_read is None or self._last_read[0] != key:
            self._last_read = (key, _AvroRead(shape, writers, self._plain, self.avro.required_fields))
        return self._last_read[1]

    def _admit(self, schema_id: int) -> Admission:
        assert self.registry is not None and self._shape is not None
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
            return Admission(
                None,
                "schema_incompatible",
                f"schema id {schema_id} is a {kind} schema; payload.format = 'avro' reads Avro",
            )
        return self._shape.admit(schema_id, text)

    def sample_values(self, count: int) -> Sequence[bytes | None]:
        """Values of the warm-up schema (`warm_up_twin`): `count - 1` that decode, one that does not."""
        body = b"\x02\x0ewarm-up"  # long 1, string "warm-up"
        broken = b"\x02"  # the string is missing: it fails in Spark, so the diagnosis is warmed too
        header = _WARM_UP_HEADER if self._plain is None else b""
        return [header + body] * (count - 1) + [header + broken]

    def warm_up_twin(self) -> PayloadFormat:
        """A reader of one built-in schema, on no registry: it warms `from_avro`'s code path."""
        twin = AvroFormat(self.avro)
        assert self._shape is not None
        twin._shape = _Shape(self._shape._jvm, None, {})
        twin._plain = json.dumps(_WARM_UP_SCHEMA) if self._plain is not None else None
        if twin._plain is not None:
            twin._shape = _Shape(self._shape._jvm, _WARM_UP_SCHEMA, {})
        else:
            twin.registry = _WarmUpRegistry()  # type: ignore[assignment]
        return twin


_WARM_UP_SCHEMA = {
    "type": "record",
    "name": "sharelake_warm_up",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
_WARM_UP_ID = 2**31 - 1
_WARM_UP_HEADER = bytes([MAGIC]) + _WARM_UP_ID.to_bytes(4, "big")


class _WarmUpRegistry:
    """The warm-up's registry: knows only the built-in schema (the warm-up must not need the network)."""

    url = "(warm-up)"

    def writer_schema(self, schema_id: int) -> tuple[str, str | None] | None:
        return (json.dumps(_WARM_UP_SCHEMA), None) if schema_id == _WARM_UP_ID else None

    def probe(self) -> None:
        return None


def _table_types(spark: SparkSession, table_path: str) -> dict[str, str]:
    """The payload columns of the table from earlier runs (Spark type names); {} for a new table."""
    jvm = spark.sparkContext._jvm
    jsc = spark.sparkContext._jsc
    assert jvm is not None and jsc is not None
    log_dir = jvm.org.apache.hadoop.fs.Path(table_path.rstrip("/") + "/_delta_log")
    if not log_dir.getFileSystem(jsc.hadoopConfiguration()).exists(log_dir):
        return {}
    schema = spark.read.format("delta").load(table_path).schema
    return {f.name: f.dataType.simpleString() for f in schema.fields if f.name not in METADATA_COLUMNS}
