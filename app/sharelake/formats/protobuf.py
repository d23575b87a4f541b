"""`payload.format = "protobuf"`: Protobuf messages in the Confluent wire format, with a schema registry.

Through the format seam (`sharelake.formats.base`): `start` reaches the registry and reads the table's columns, `read`
gives a batch's verdicts on the driver and its Spark read, `probe` asks the registry again after an outage.

A value is magic byte 0, a 4-byte big-endian schema id, the message indexes (which message of the
schema's file), then the Protobuf body (read by `sharelake.formats.wire`). Per batch, on the driver
(numpy over the Arrow value column, no per-record Python): each value's header (`not_wire_format`:
shorter than 5 bytes or magic byte not 0; `bad_message_index`: the indexes are cut short, or point
at no message of the schema); each schema id not seen before is fetched from the registry once for
the life of the job (`unknown_schema_id` on a 404) and turned into descriptors
(`sharelake.formats.protobuf_schemas`); each (id, message) is admitted to the table's shape, or not
(`schema_incompatible`). A registry that does not answer, or refuses us, raises
`RegistryUnavailableError`: never the record's fault, the batch is RELEASEd and retried.

**The table's shape** (`sharelake.formats.shape.Shape`) grows with the writer messages, by field
name: a field a new writer adds joins it as a nullable column (`mergeSchema` adds it to the table),
a field a writer lacks reads null, an int32 reads into a table's bigint and a float into a double. A
field whose type would change a column's type is refused, nested messages included (a nested message
that gains a field is a new type of its column). Arrow types Spark lacks are replaced: unsigned integers by wider
signed ones (uint64 by decimal(20, 0)), any timestamp by microseconds UTC.

**In Spark**, inside the one write job: a scalar Arrow UDF over the value column
(`sharelake.formats.protobuf_decode`) decodes each body with ptars (Rust, into Arrow columns) and
flags the bodies that do not decode (`protobuf_decode_failed`). Spark's own `from_protobuf`
(spark-protobuf) is not served for Spark 4.2 from Maven Central.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import model_validator
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import BooleanType, DataType, StringType, StructField, StructType

from sharelake.formats.base import (
    BAD,
    ERROR_CLASS,
    ERROR_MESSAGE,
    METADATA_COLUMNS,
    PARSED,
    BadRecord,
    BatchRead,
    ColumnRead,
    FormatSettings,
    PayloadFormat,
)
from sharelake.formats.protobuf_decode import DecodePlan, Writer, decode_values
from sharelake.formats.protobuf_schemas import SchemaProblem, message_at, schema_files, writer_schema
from sharelake.formats.schema_registry_client import WARM_UP_ID, WarmUpRegistry
from sharelake.formats.shape import Shape, ShapedFormat
from sharelake.formats.wire import NOT_WIRE_FORMAT, Headers, header, message_headers, message_path

log = logging.getLogger(__name__)

MessageKey = tuple[int, tuple[int, ...]]  # (schema id, message indexes)
DECODED = "_decoded"  # the decode's struct: PARSED, BAD and the error class and message


class ProtobufSettings(FormatSettings):
    format: Literal["protobuf"] = "protobuf"

    @model_validator(mode="after")
    def _needs_a_registry(self) -> ProtobufSettings:
        if self.registry is None:
            raise ValueError("payload.format = 'protobuf' reads the Confluent wire format: set payload.registry.url")
        return self

    def values_note(self) -> str:
        return f"protobuf, writer schemas from {self.registry_note()}"


def _spark_ready(kind: pa.DataType) -> pa.DataType:
    """`kind` with the Arrow types Spark lacks replaced: unsigned integers by wider signed ones
    (uint64 by decimal(20, 0)), any timestamp by microseconds UTC."""
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_spark_ready(f.type)) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(_spark_ready(kind.key_type), kind.item_field.with_type(_spark_ready(kind.item_type)))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(kind.value_field.with_type(_spark_ready(kind.value_type)))
    if pa.types.is_uint64(kind):
        return pa.decimal128(20, 0)
    if pa.types.is_unsigned_integer(kind):
        return pa.int64()
    if pa.types.is_timestamp(kind):
        return pa.timestamp("us", tz="UTC")
    return kind


def spark_type(kind: pa.DataType) -> DataType:
    """The Spark type of an Arrow column ptars decodes (unsupported ones raise)."""
    return from_arrow_type(_spark_ready(kind), prefer_timestamp_ntz=False)


class _ProtobufRead(ColumnRead):
    """The Spark read of one batch: a scalar Arrow UDF over `value` that decodes each body into the
    shape and names each bad one (only the values travel to Spark's Python workers)."""

    def __init__(self, plan: DecodePlan, shape: StructType):
        result = StructType(
            [
                StructField(PARSED, shape, True),
                StructField(BAD, BooleanType(), True),
                StructField(ERROR_CLASS, StringType(), True),
                StructField(ERROR_MESSAGE, StringType(), True),
            ]
        )

        def decode_batch(values: pa.Array) -> pa.Array:
            return decode_values(plan, values)

        decode = F.arrow_udf(decode_batch, result)  # scalar: its type hints say so
        # non-deterministic to the optimizer: else it pushes the filter on BAD below the projection
        # and runs the decode twice (once for the filter, once for the columns)
        decode = decode.asNondeterministic()
        decoded = F.col(DECODED)
        metadata = [F.col(c) for c in METADATA_COLUMNS if c != "value"]
        super().__init__(
            {DECODED: decode(F.col("value")), PARSED: decoded[PARSED], BAD: decoded[BAD]},
            decoded[ERROR_CLASS],
            decoded[ERROR_MESSAGE],
            [*metadata, *(F.col(PARSED)[n].alias(n) for n in shape.fieldNames())],
        )


class ProtobufFormat(ShapedFormat):
    name = "protobuf"
    settings_model = ProtobufSettings
    error_classes = (
        "not_wire_format",
        "unknown_schema_id",
        "bad_message_index",
        "protobuf_decode_failed",
        "schema_incompatible",
    )

    def __init__(self, settings: ProtobufSettings, registry: Any = None):
        super().__init__(settings, registry)
        self._files: dict[int, tuple[bytes, ...] | BadRecord] = {}  # per schema id: its files, or why not
        self._writers: dict[MessageKey, Writer | BadRecord] = {}  # per (id, indexes): admitted, or why not
        self._last: tuple[tuple[Any, ...], _ProtobufRead] | None = None

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        assert self.shape is not None, "ProtobufFormat.start() first"
        values = rows.column("value")
        headers = message_headers(values)
        bad = [BadRecord(i, "not_wire_format", NOT_WIRE_FORMAT) for i in np.flatnonzero(~headers.framed).tolist()]
        cut = headers.framed & ~headers.indexes_ok
        bad += [
            BadRecord(i, "bad_message_index", "the message indexes after the schema id are cut short or negative")
            for i in np.flatnonzero(cut).tolist()
        ]
        readable = headers.framed & headers.indexes_ok & (headers.ids >= 0)
        writers = self._verdicts(headers, readable, bad)
        key = (tuple(sorted(writers)), len(self.shape.fields))
        if self._last is None or self._last[0] != key:
            shape = self.shape.spark_type()
            plan = DecodePlan(writers, to_arrow_type(shape, timezone="UTC"))
            self._last = (key, _ProtobufRead(plan, shape))
        return bad, self._last[1]

    def _verdicts(self, headers: Headers, readable: np.ndarray, bad: list[BadRecord]) -> dict[MessageKey, Writer]:
        """The writer of each (id, indexes) of the batch; the rows of refused ones join `bad`."""
        keys, group_of = headers.message_keys(readable)
        rows = np.flatnonzero(readable)
        writers: dict[MessageKey, Writer] = {}
        for g, raw in enumerate(keys):
            sid, path, _ = message_path(raw)
            verdict = self._writer((sid, path))  # RegistryUnavailableError: the batch is retried
            if isinstance(verdict, Writer):
                writers[(sid, path)] = verdict
                continue
            bad += [BadRecord(i, verdict.error_class, verdict.message) for i in rows[group_of == g].tolist()]
        return writers

    def _writer(self, key: MessageKey) -> Writer | BadRecord:
        if key in self._writers:
            return self._writers[key]
        sid, path = key
        files = self._schema(sid)
        if isinstance(files, BadRecord):
            return files  # not kept per message: the id's verdict is
        assert self.shape is not None
        try:
            writer = Writer(files, message_at(files, path))
        except SchemaProblem as e:
            verdict: Writer | BadRecord = BadRecord(-1, "bad_message_index", f"schema id {sid}: {e}")
        else:
            columns = [(column.name, column.type) for column in writer_schema(writer)]
            problem = self.shape.admit(f"{writer.name} (schema id {sid})", columns, spark_type)
            verdict = writer if problem is None else BadRecord(-1, "schema_incompatible", problem)
        self._writers[key] = verdict
        return verdict

    def _schema(self, sid: int) -> tuple[bytes, ...] | BadRecord:
        if sid in self._files:
            return self._files[sid]
        found = self.registry.writer_schema(sid)  # RegistryUnavailableError: the batch is retried
        verdict: tuple[bytes, ...] | BadRecord
        if found is None:
            verdict = BadRecord(-1, "unknown_schema_id", f"schema id {sid} is not in the registry {self.registry.url}")
        elif found[1] == "references":
            verdict = BadRecord(
                -1,
                "schema_incompatible",
                f"schema id {sid} uses schema references (imports of other subjects): not resolved",
            )
        elif found[1] not in (None, "PROTOBUF"):
            verdict = BadRecord(
                -1, "schema_incompatible", f"schema id {sid} is a {found[1]} schema, not a Protobuf one"
            )
        else:
            try:
                verdict = schema_files(found[0])
            except SchemaProblem as e:
                verdict = BadRecord(-1, "schema_incompatible", f"schema id {sid}: {e}")
        self._files[sid] = verdict
        return verdict

    def sample_values(self, count: int) -> Sequence[bytes | None]:
        """Values of the warm-up message (`warm_up_twin`): `count - 1` that decode, one that does not."""
        return [WARM_UP_HEADER + WARM_UP_BODY] * (count - 1) + [WARM_UP_HEADER + b"\x12\x09warm"]

    def warm_up_twin(self) -> PayloadFormat:
        """A reader of one built-in message, on no registry: it warms the decode's code path."""
        assert isinstance(self.settings, ProtobufSettings)
        twin = ProtobufFormat(self.settings, WarmUpRegistry(_warm_up_schema(), "PROTOBUF"))
        twin.shape = Shape({})
        return twin


WARM_UP_HEADER = header(WARM_UP_ID) + b"\x00"  # message indexes [0]
WARM_UP_BODY = b"\x08\x01\x12\x07warm-up"  # id = 1, name = "warm-up"


def _warm_up_schema() -> str:
    import base64

    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="sharelake_warm_up.proto", package="sharelake", syntax="proto3")
    message = file.message_type.add(name="WarmUp")
    message.field.add(name="id", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    message.field.add(name="name", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    return base64.b64encode(file.SerializeToString()).decode()
