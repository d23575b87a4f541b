"""The Protobuf decode that runs inside Spark: wire-format values in, the parsed struct and verdicts out.

`decode_values` runs in Spark's Python workers as a scalar Arrow UDF over the `value` column: only the values
travel to Python, with the batch's `DecodePlan` from the driver (the writer of each (schema id, message indexes),
and the table's shape). Per Arrow batch: the wire headers (`sharelake.formats.wire`, vectorised), then per (schema id,
message indexes) one call to ptars, which parses the bodies straight into Arrow columns in Rust (no per-record
Python; one converter per writer, built once per worker process). A body that does not parse fails the whole call,
so the bodies of a failed call are halved until each bad one stands alone (`protobuf_decode_failed`); the good ones
are decoded in as few calls as that allows. A value without a readable header, or of a message the driver refused,
is flagged too (`not_wire_format`, `bad_message_index`). Each writer's columns are then laid into the table's
shape: a field the writer lacks reads null, a narrower number is widened.

Spark has no Protobuf reader of its own here: `spark-protobuf` (`from_protobuf`) is not served for Spark 4.2 from
Maven Central.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as _pc

from sharelake.formats.base import BAD, ERROR_CLASS, ERROR_MESSAGE, PARSED
from sharelake.formats.wire import message_headers, message_path

pc: Any = _pc  # pyarrow.compute's kernels are generated at import: untyped

BINARY_END = 2**31 - 1  # past the end of any value of a binary (32-bit offsets) array


@dataclass(frozen=True)
class Writer:
    """One writer message: the schema's files (dependencies first, serialized FileDescriptorProtos)
    and the message's full name."""

    files: tuple[bytes, ...]
    name: str


@dataclass(frozen=True)
class DecodePlan:
    """What the workers need for one batch: each (schema id, message indexes)'s writer, the shape."""

    writers: dict[tuple[int, tuple[int, ...]], Writer]
    shape: pa.StructType  # the parsed struct, as Spark expects it back


def ptars_config() -> Any:
    """How Protobuf types land in Arrow: timestamps in microseconds UTC (Spark's), enums by name."""
    from ptars import PtarsConfig

    return PtarsConfig(timestamp_unit="us", timestamp_tz="UTC", enum_repr="string", list_value_nullable=True)


@functools.lru_cache(maxsize=256)
def handler(writer: Writer) -> Any:
    """ptars' converter of `writer`'s bodies, built once per worker process."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from ptars import HandlerPool

    pool = descriptor_pool.DescriptorPool()
    for raw in writer.files:
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(raw))
    last = descriptor_pb2.FileDescriptorProto.FromString(writer.files[-1])
    files = HandlerPool([pool.FindFileByName(last.name)], config=ptars_config())
    return files.get_for_message(pool.FindMessageTypeByName(writer.name))


def decode_good(
    convert: Any, values: pa.Array, at: int = 0
) -> tuple[list[tuple[int, pa.RecordBatch]], list[int], str | None]:
    """`values` decoded in as few calls as the bad ones allow: (start, batch) pieces, bad positions, a cause."""
    try:
        return [(at, convert.array_to_record_batch(values))], [], None
    except ValueError as e:
        if len(values) == 1:
            return [], [at], str(e)
    half = len(values) // 2
    left = decode_good(convert, values.slice(0, half), at)
    right = decode_good(convert, values.slice(half), at + half)
    return left[0] + right[0], left[1] + right[1], left[2] or right[2]


def widened(array: pa.Array, target: pa.DataType) -> pa.Array:
    """`array` as `target` (the shape's type): unsigned to signed or decimal, int32 to int64, nullability."""
    if pa.types.is_struct(target):
        struct = array if isinstance(array, pa.StructArray) else pa.StructArray.from_arrays([], [])
        return laid_out(struct, target)
    return array.cast(target)


def laid_out(struct: pa.StructArray | pa.RecordBatch, shape: pa.StructType) -> pa.StructArray:
    """The columns of `struct` in the order and types of `shape`; fields it lacks are null."""
    if isinstance(struct, pa.RecordBatch):
        children, n, mask = dict(zip(struct.schema.names, struct.columns, strict=True)), struct.num_rows, None
    else:  # flatten: the children with the struct's offset and nulls applied
        children = dict(zip([f.name for f in struct.type], struct.flatten(), strict=True))
        n, mask = len(struct), struct.is_null()
    columns = [
        widened(children[field.name], field.type) if field.name in children else pa.nulls(n, field.type)
        for field in shape
    ]
    return pa.StructArray.from_arrays(columns, fields=list(shape), mask=mask)


def decode_values(plan: DecodePlan, values: pa.Array) -> pa.StructArray:
    """Per wire-format value: PARSED (the shape), BAD, ERROR_CLASS and ERROR_MESSAGE, as one struct."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    headers = message_headers(values)
    valid = values.is_valid().to_numpy(zero_copy_only=False) if n else np.ones(0, np.bool_)
    readable = valid & headers.framed & headers.indexes_ok & (headers.ids >= 0)
    keys, group_of = headers.message_keys(readable)
    rows = np.flatnonzero(readable)
    pieces: list[pa.StructArray] = []
    placed: list[npt.NDArray[np.int64]] = []
    bad = np.zeros(n, dtype=np.bool_)
    classes: list[str | None] = [None] * n  # filled for bad rows only (few)
    messages: list[str | None] = [None] * n
    bad[valid & ~readable] = True  # the driver dead-letters these first; kept out of the table here too
    for row in np.flatnonzero(valid & ~readable).tolist():
        framed = bool(headers.framed[row])
        classes[row] = "bad_message_index" if framed else "not_wire_format"
        messages[row] = "message indexes cut short or negative" if framed else "no Confluent wire-format header"
    for g, key in enumerate(keys):
        sid, path, body_start = message_path(key)
        members = rows[group_of == g]
        writer = plan.writers.get((sid, path))
        if writer is None:  # the driver refused this id or message: never reaches a table
            bad[members] = True
            for row in members.tolist():
                classes[row], messages[row] = "bad_message_index", f"no message {list(path)} in schema id {sid}"
            continue
        # an explicit stop: pyarrow's binary_slice without one fails (negative buffer resize)
        group = pc.binary_slice(values.take(pa.array(members)), body_start, BINARY_END)
        good, failed, cause = decode_good(handler(writer), group)
        for start, decoded in good:
            pieces.append(laid_out(decoded, plan.shape))
            placed.append(members[start : start + decoded.num_rows])
        for position in failed:
            row = int(members[position])
            bad[row] = True
            classes[row] = "protobuf_decode_failed"
            messages[row] = f"the body does not decode as {writer.name} (schema id {sid}): {cause}"
    missing = np.setdiff1d(np.arange(n), np.concatenate(placed) if placed else np.zeros(0, np.int64))
    pieces.append(pa.nulls(len(missing), plan.shape))
    placed.append(missing)
    order = np.concatenate(placed)
    parsed = pa.concat_arrays(pieces).take(pa.array(np.argsort(order, kind="stable")))
    return pa.StructArray.from_arrays(
        [parsed, pa.array(bad), pa.array(classes, pa.string()), pa.array(messages, pa.string())],
        names=[PARSED, BAD, ERROR_CLASS, ERROR_MESSAGE],
    )
